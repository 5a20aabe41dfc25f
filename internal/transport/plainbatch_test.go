package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestPlainBatchMatchesGeneral: a batch of plain takes goes in the short
// form (three arguments), and one of takes across subjects alike in the
// form across ("A"), each decided in a straight line up to the first
// request the line cannot decide (a bucket written under another limit,
// stamped ahead of the clock, with a loan out; across, in debt too), the
// rest in the general form. It answers, writes and expires as the
// general form does: on a miniredis whose clock stands still, to the
// byte; on Redis, to the token.
func TestPlainBatchMatchesGeneral(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Unix(1767225600, 250000000))
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { mc.Close() })
	for name, c := range map[string]*redis.Client{"redis": redistest.Client(t), "miniredis": mc} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			short, long := New(c, prefix+"s:"), New(c, prefix+"l:")
			five := mustPolicies(t, NamedLimit{Name: "p", Limit: slow})
			other := mustPolicies(t, NamedLimit{Name: "p", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 9}})
			now, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []*Store{short, long} {
				sendBatch(t, s, []batchReq{{"b", 1, other}})
				sendOps(t, s, []batchReq{{"d", 5, five}, {"d", 5, five}}, []int{bucket.OpTake, bucket.WithArg(bucket.OpCharge, 10*time.Hour.Microseconds())})
				s.lend(t, "e", five, 0, nil, 7, []int64{2}, time.Minute)
				ahead := fmt.Sprintf("3:%d:%s", now.UnixMicro()+int64(10*time.Minute/time.Microsecond), five[0].Desc())
				for _, subj := range []string{"g", "G"} {
					if err := c.Set(ctx, s.Key(bucket.HashSubject(subj), "p"), ahead, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for round, subjs := range []string{"acfh", "abc", "cda", "fea", "hga", "acfh", "bdegh"} {
				batch := func() []*request {
					b := make([]*request, len(subjs))
					for i, subj := range subjs {
						b[i] = &request{ctx: ctx, Ask: bucket.Ask{Subj: bucket.HashSubject(string(subj)), Op: bucket.OpTake, N: 1 + round%2, Policies: five}}
					}
					return b
				}
				compareForms(t, c, name == "miniredis", short, long, batch(), batch(), 3)
			}
			// Across subjects: each request two buckets, "<subject>1" and
			// "<subject>2", of costs 1 and 0 (a look), then 2 and 1.
			for round, subjs := range []string{"acfh", "abc", "cda", "fea", "hga", "acfh", "bdegh"} {
				batch := func() []*request {
					b := make([]*request, len(subjs))
					for i, subj := range subjs {
						x, y := bucket.HashSubject(string(subj)), bucket.HashSubject(string(subj)+"2")
						b[i] = &request{ctx: ctx, Ask: bucket.Ask{Subj: x, Op: bucket.OpTake, Policies: []bucket.Policy{five[0], five[0]},
							Each: make([]bucket.Outcome, 2), Across: []bucket.Part{{Subj: x, N: 1 + round%2}, {Subj: y, N: round % 2}}}}
					}
					return b
				}
				compareForms(t, c, name == "miniredis", short, long, batch(), batch(), 6)
			}
			// Across subjects with buckets asked by several requests, as an
			// Envoy service's: each request its subject's bucket, a tenant's
			// of two ("t0", "t1") and the route's ("r", under a limit of its
			// own), of costs 1 or 2, 0 or 1, and 1 ("HHHH": two takes, then
			// two refusals that ask the tenants and the route last). "z" is
			// its own tenant (one bucket twice in a request), and "y" has
			// the tenant "r" and the route "s" (the route's bucket under two
			// limits): both go whole to the general form, as do the batches
			// that meet "b", "d", "e" or "G" (as "g").
			route := mustPolicies(t, NamedLimit{Name: "p", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 40}})[0]
			for round, subjs := range []string{"ACFH", "HHHH", "HFCA", "AbC", "AzC", "AyC", "CdA", "CCAA", "HFCA", "FeA", "ACFH", "AGC", "z", "C"} {
				batch := func() []*request {
					b := make([]*request, len(subjs))
					for i, subj := range subjs {
						x, tenant, r := bucket.HashSubject(string(subj)), bucket.HashSubject(fmt.Sprintf("t%d", i%2)), bucket.HashSubject("r")
						switch subj {
						case 'z':
							tenant = x
						case 'y':
							tenant, r = r, bucket.HashSubject("s")
						}
						b[i] = &request{ctx: ctx, Ask: bucket.Ask{Subj: x, Op: bucket.OpTake, Policies: []bucket.Policy{five[0], five[0], route},
							Each: make([]bucket.Outcome, 3), Across: []bucket.Part{{Subj: x, N: 1 + round%2}, {Subj: tenant, N: round % 2}, {Subj: r, N: 1}}}}
					}
					return b
				}
				compareForms(t, c, name == "miniredis", short, long, batch(), batch(), 8)
			}
		})
	}
}

// compareForms sends sb through short's short form (of want arguments)
// and lb, the same requests, through long's general form, and compares
// their answers and the buckets they leave: to the byte when exact.
func compareForms(t *testing.T, c *redis.Client, exact bool, short, long *Store, sb, lb []*request, want int) {
	t.Helper()
	ctx := context.Background()
	keys, args := short.encodeShort(ctx, short.idSeq.Add(1), sb)
	if len(args) != want {
		t.Fatalf("%d arguments; want the short form's %d", len(args), want)
	}
	reply, err := TokenBuckets.Run(ctx, c, keys, args...).Text()
	short.settle(ctx, sb, 0, reply, err)
	lkeys, largs := long.encode(ctx, long.idSeq.Add(1), lb)
	reply, err = TokenBuckets.Run(ctx, c, lkeys, largs...).Text()
	long.settle(ctx, lb, 0, reply, err)
	k := 0
	for i := range sb {
		ge, we := make([]bucket.Outcome, len(sb[i].Policies)), make([]bucket.Outcome, len(sb[i].Policies))
		g, err1 := ParseReply(sb[i].reply, ge)
		w, err2 := ParseReply(lb[i].reply, we)
		if err1 != nil || err2 != nil || g.Allowed != w.Allowed || g.Remaining != w.Remaining || exact && sb[i].reply != lb[i].reply {
			t.Fatalf("request %d: short %q %v, general %q %v", i, sb[i].reply, err1, lb[i].reply, err2)
		}
		for range sb[i].Policies {
			sk, lk := keys[k], lkeys[k]
			k++
			sv, lv := c.Get(ctx, sk).Val(), c.Get(ctx, lk).Val()
			st, lt := c.PTTL(ctx, sk).Val(), c.PTTL(ctx, lk).Val()
			if exact && (sv != lv || st != lt) {
				t.Fatalf("request %d, %s: short %q %v, general %q %v", i, sk, sv, st, lv, lt)
			}
			if d := st - lt; d < -time.Second || d > time.Second {
				t.Errorf("request %d, %s: expiry %v short, %v general", i, sk, st, lt)
			}
		}
	}
}

// TestAcrossShortMatchesGeneralRandom sends random batches of takes
// across subjects alike (1 to 3 buckets a request under three limits,
// costs 0 to 2, subjects of a small set: buckets repeat within requests
// and across them) through the short form and the general form, on a
// miniredis whose clock moves between batches: replies, values and
// expiries the same to the byte.
func TestAcrossShortMatchesGeneralRandom(t *testing.T) {
	m := miniredis.RunT(t)
	start := time.Unix(1767225600, 250000000)
	m.SetTime(start)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	short, long := New(c, "s:"), New(c, "l:")
	limits := mustPolicies(t, NamedLimit{Name: "p", Limit: slow}, NamedLimit{Name: "q", Limit: Limit{Rate: 1, Period: time.Minute, Burst: 9}},
		NamedLimit{Name: "r", Limit: PerSecond(1000000)})
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 400 {
		if round%20 == 19 {
			m.SetTime(start.Add(time.Duration(round) * 3 * time.Second))
		}
		k, d := 1+rng.IntN(3), 1+rng.IntN(6)
		ps, ns := make([]bucket.Policy, k), make([]int, k)
		for i := range ps {
			ps[i], ns[i] = limits[rng.IntN(len(limits))], rng.IntN(3)
		}
		subjs := make([]string, d*k)
		for i := range subjs {
			subjs[i] = bucket.HashSubject(strconv.Itoa(rng.IntN(8)))
		}
		batch := func() []*request {
			b := make([]*request, d)
			for j := range b {
				parts := make([]bucket.Part, k)
				for i := range parts {
					parts[i] = bucket.Part{Subj: subjs[j*k+i], N: ns[i]}
				}
				b[j] = &request{ctx: ctx, Ask: bucket.Ask{Subj: parts[0].Subj, Op: bucket.OpTake, Policies: ps, Each: make([]bucket.Outcome, k), Across: parts}}
			}
			return b
		}
		want := 2 + 2*k
		if k == 1 && ns[0] > 0 {
			want = 3 // plain takes, unless a bucket repeats: then both general
			if _, again := repeats(subjs, nil); again > 0 {
				continue
			}
		}
		compareForms(t, c, true, short, long, batch(), batch(), want)
	}
}
