package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/redistest"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Tests of TokenBuckets, the script deciding a batch, called directly with
// batches of a known make-up (through the store, which requests travel
// together depends on timing).

type batchReq struct {
	subj string
	n    int
	ps   []bucket.Policy
}

type batchAns struct {
	o    bucket.Outcome
	each []bucket.Outcome
	err  error
}

// scriptServers returns the real Redis and a miniredis, each as a client.
func scriptServers(t *testing.T) map[string]*redis.Client {
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { mc.Close() })
	return map[string]*redis.Client{"redis": redistest.Client(t), "miniredis": mc}
}

// sendBatch decides reqs as one batch through s, as its sender would, and
// returns each one's answer.
func sendBatch(t *testing.T, s *Store, reqs []batchReq) []batchAns {
	t.Helper()
	return sendOps(t, s, reqs, nil)
}

// sendOps is sendBatch with request i's operation ops[i] (nil: takes).
func sendOps(t *testing.T, s *Store, reqs []batchReq, ops []int) []batchAns {
	t.Helper()
	batch := make([]*request, len(reqs))
	for i, r := range reqs {
		if err := bucket.Check(r.subj, r.n, r.ps); err != nil {
			t.Fatal(err)
		}
		op := bucket.OpTake
		if ops != nil {
			op = ops[i]
		}
		batch[i] = &request{ctx: context.Background(), Ask: bucket.Ask{Subj: bucket.HashSubject(r.subj), Op: op, N: r.n, Policies: r.ps}}
	}
	s.send(context.Background(), "", batch)
	out := make([]batchAns, len(reqs))
	for i, r := range batch {
		out[i].each = make([]bucket.Outcome, len(reqs[i].ps))
		out[i].err = r.err
		if r.err == nil {
			out[i].o, out[i].err = ParseReply(r.reply, out[i].each)
		}
	}
	return out
}

// slow is a limit whose refill adds far less than a token while a test
// runs, so that what a bucket holds is known to the token.
var slow = Limit{Rate: 1, Period: time.Hour, Burst: 5}

func TestBatchScriptInOrder(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			s := New(c, redistest.Prefix(t))
			ps := mustPolicies(t, NamedLimit{Name: "a", Limit: slow})
			var reqs []batchReq
			for range 7 {
				reqs = append(reqs, batchReq{"hot", 1, ps})
			}
			reqs = append(reqs, batchReq{"other", 2, ps})
			got := sendBatch(t, s, reqs)
			for i, a := range got[:7] {
				wantOK, wantRem := i < 5, int64(4-i)
				if i >= 5 {
					wantRem = 0
				}
				if a.err != nil || a.o.Allowed != wantOK || a.o.Remaining != wantRem || (a.o.RetryAfter > 0) == wantOK {
					t.Errorf("hot #%d: %+v %v; want allowed %v remaining %d", i, a.o, a.err, wantOK, wantRem)
				}
			}
			if a := got[7]; a.err != nil || !a.o.Allowed || a.o.Remaining != 3 {
				t.Errorf("other: %+v %v; want allowed, 3 left", a.o, a.err)
			}

			// The script wrote what the single-decision path reads.
			plain := New(c, s.prefix)
			if o, err := plain.Take(context.Background(), "hot", 1, ps, nil); err != nil || o.Allowed {
				t.Errorf("hot after the batch: %+v %v; want denied", o, err)
			}
			if o, err := plain.Take(context.Background(), "other", 1, ps, nil); err != nil || !o.Allowed || o.Remaining != 2 {
				t.Errorf("other after the batch: %+v %v; want allowed, 2 left", o, err)
			}

			// A batch of denials writes nothing.
			key := s.Key("hot", "a")
			before := c.Get(context.Background(), key).Val()
			for _, a := range sendBatch(t, s, []batchReq{{"hot", 1, ps}, {"hot", 2, ps}}) {
				if a.err != nil || a.o.Allowed {
					t.Errorf("denied batch: %+v %v", a.o, a.err)
				}
			}
			if after := c.Get(context.Background(), key).Val(); after != before {
				t.Errorf("a denied batch rewrote the bucket: %q → %q", before, after)
			}
		})
	}
}

// TestBatchScriptExpiry: a bucket written by the batch script expires a
// second after it would be full again, as with the single script.
func TestBatchScriptExpiry(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, redistest.Prefix(t))
	ps := mustPolicies(t, NamedLimit{Name: "m", Limit: Limit{Rate: 10, Period: time.Minute, Burst: 10}})
	got := sendBatch(t, s, []batchReq{{"a", 3, ps}, {"b", 1, ps}, {"a", 1, ps}})
	for _, tc := range []struct {
		subj  string
		reset time.Duration // after the batch's last request on it
	}{{"a", 4 * 6 * time.Second}, {"b", 6 * time.Second}} {
		pttl := c.PTTL(context.Background(), s.Key(tc.subj, "m")).Val()
		want := tc.reset + time.Second
		if pttl > want || pttl < want-500*time.Millisecond {
			t.Errorf("%s: PTTL %v, want about %v", tc.subj, pttl, want)
		}
	}
	if got[2].o.Remaining != 6 || got[2].o.ResetAfter != 4*6*time.Second {
		t.Errorf("a's second request: %+v, want 6 left, full in 24s", got[2].o)
	}
}

func TestBatchScriptMultiPolicy(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			s := New(c, redistest.Prefix(t))
			ps := mustPolicies(t,
				NamedLimit{Name: "second", Limit: PerSecond(5)},
				NamedLimit{Name: "hour", Limit: PerHour(3)},
			)
			one := mustPolicies(t, NamedLimit{Name: "hour", Limit: PerHour(3)})
			// "k" three times under both policies, with a request under
			// "hour" alone (the same bucket as the pair's second) between.
			got := sendBatch(t, s, []batchReq{{"k", 1, ps}, {"k", 1, one}, {"k", 1, ps}, {"k", 1, ps}})
			want := []struct {
				allowed bool
				policy  int
				rem     int64
				hour    int64
			}{{true, 1, 2, 2}, {true, 0, 1, 1}, {true, 1, 0, 0}, {false, 1, 0, 0}}
			for i, w := range want {
				a := got[i]
				hour := a.each[len(a.each)-1].Remaining
				if a.err != nil || a.o.Allowed != w.allowed || a.o.Policy != w.policy || a.o.Remaining != w.rem || hour != w.hour {
					t.Errorf("request %d: %+v each %+v %v; want allowed %v policy %d remaining %d, hour %d",
						i, a.o, a.each, a.err, w.allowed, w.policy, w.rem, w.hour)
				}
			}
			// The denial by "hour" took nothing from "second".
			if o := got[3].each[0]; o.Remaining != 3 {
				t.Errorf("second after the denial: %+v, want 3 left", o)
			}
		})
	}
}

// TestBatchScriptManyPolicies: a batch of requests with many distinct
// policies between them is one script call, with the answers each would get
// alone.
func TestBatchScriptManyPolicies(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, redistest.Prefix(t))
	var reqs []batchReq
	for i := range 40 {
		ps := mustPolicies(t, NamedLimit{Name: fmt.Sprint("p", i), Limit: Limit{Rate: 1, Period: time.Hour, Burst: 1 + i}})
		reqs = append(reqs, batchReq{"k", 1, ps}, batchReq{"k", 1, ps})
	}
	for i, a := range sendBatch(t, s, reqs) {
		burst := int64(1 + i/2)
		wantOK := i%2 == 0 || burst > 1
		wantRem := burst - 1 - int64(i%2)
		if !wantOK {
			wantRem = 0
		}
		if a.err != nil || a.o.Allowed != wantOK || a.o.Remaining != wantRem {
			t.Errorf("request %d: %+v %v; want allowed %v remaining %d", i, a.o, a.err, wantOK, wantRem)
		}
	}
}

// TestBatchScriptMatchesSingle: random batches over a few subjects and
// policy sets get, request by request, the answers the same requests get
// sent alone, one after the other.
func TestBatchScriptMatchesSingle(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			batched := New(c, prefix+"b:")
			single := New(c, prefix+"s:")
			sets := [][]bucket.Policy{
				mustPolicies(t, NamedLimit{Name: "x", Limit: slow}),
				mustPolicies(t, NamedLimit{Name: "y", Limit: Limit{Rate: 2, Period: time.Hour, Burst: 9}}),
				mustPolicies(t, NamedLimit{Name: "x", Limit: slow}, NamedLimit{Name: "z", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 3}}),
			}
			rng := rand.New(rand.NewPCG(1, 2))
			allowed, denied := 0, 0
			for range 60 {
				reqs := make([]batchReq, 1+rng.IntN(12))
				for i := range reqs {
					set := sets[rng.IntN(len(sets))]
					reqs[i] = batchReq{fmt.Sprint("s", rng.IntN(4)), 1 + rng.IntN(3), set}
				}
				got := sendBatch(t, batched, reqs)
				for i, r := range reqs {
					each := make([]bucket.Outcome, len(r.ps))
					want, err := single.Take(context.Background(), r.subj, r.n, r.ps, each)
					if err != nil {
						t.Fatal(err)
					}
					g := got[i]
					if g.err != nil || g.o.Allowed != want.Allowed || g.o.Policy != want.Policy || g.o.Remaining != want.Remaining {
						t.Fatalf("request %+v: batched %+v %v, single %+v", r, g.o, g.err, want)
					}
					for j := range each {
						if g.each[j].Remaining != each[j].Remaining {
							t.Fatalf("request %+v policy %d: batched %+v, single %+v", r, j, g.each[j], each[j])
						}
					}
					if want.Allowed {
						allowed++
					} else {
						denied++
					}
				}
			}
			if allowed < 20 || denied < 20 {
				t.Fatalf("allowed %d, denied %d: the batches did not exercise both", allowed, denied)
			}
		})
	}
}

// TestBatchScriptRepeatsMatchSingle: a batch that asks buckets again —
// takes, peeks and refunds of a few subjects, under limits that differ
// for one name, up to 45 buckets (past the 16 whose repeats encode finds
// by comparison) — answers as the same requests one at a time, and
// leaves the buckets as they do.
func TestBatchScriptRepeatsMatchSingle(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			batched := New(c, prefix+"b:")
			single := New(c, prefix+"s:")
			sets := [][]bucket.Policy{
				mustPolicies(t, NamedLimit{Name: "x", Limit: slow}),
				mustPolicies(t, NamedLimit{Name: "x", Limit: Limit{Rate: 2, Period: time.Hour, Burst: 9}}),
				mustPolicies(t, NamedLimit{Name: "x", Limit: slow}, NamedLimit{Name: "z", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 3}}),
				mustPolicies(t, NamedLimit{Name: "z", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 3}}, NamedLimit{Name: "y", Limit: Limit{Rate: 3, Period: time.Hour, Burst: 4}}, NamedLimit{Name: "x", Limit: slow}),
			}
			ops := []int{bucket.OpTake, bucket.OpTake, bucket.OpTake, bucket.OpPeek, bucket.OpRefund}
			rng := rand.New(rand.NewPCG(3, 4))
			seen := map[int]int{}
			// A single request runs after its batch, so the two buckets'
			// times differ by up to the longest a round has taken: a
			// second, or more on a loaded -race run.
			slack := time.Second
			for round := range 80 {
				sent := time.Now()
				reqs, rops := make([]batchReq, 1+rng.IntN(20)), make([]int, 0, 20)
				for i := range reqs {
					reqs[i] = batchReq{fmt.Sprint("s", rng.IntN(3)), 1 + rng.IntN(2), sets[rng.IntN(len(sets))]}
					rops = append(rops, ops[rng.IntN(len(ops))])
				}
				got := sendOps(t, batched, reqs, rops)
				for i, r := range reqs {
					each := make([]bucket.Outcome, len(r.ps))
					var want bucket.Outcome
					var err error
					switch rops[i] {
					case bucket.OpTake:
						want, err = single.Take(ctx, r.subj, r.n, r.ps, each)
					case bucket.OpPeek:
						want, err = single.Peek(ctx, r.subj, r.n, r.ps, each)
					case bucket.OpRefund:
						want, err = single.Refund(ctx, r.subj, r.n, r.ps, each)
					}
					if err != nil {
						t.Fatal(err)
					}
					g := got[i]
					// (Which policy binds may differ: waits a few µs apart.)
					if g.err != nil || g.o.Allowed != want.Allowed {
						t.Fatalf("round %d request %d %+v: batched %+v %v, single %+v", round, i, r, g.o, g.err, want)
					}
					slack = max(slack, time.Since(sent))
					for j := range each {
						b, w := g.each[j], each[j]
						if b.Remaining != w.Remaining || (b.RetryAfter == 0) != (w.RetryAfter == 0) ||
							(b.RetryAfter-w.RetryAfter).Abs() > slack || (b.ResetAfter-w.ResetAfter).Abs() > slack {
							t.Fatalf("round %d request %d %+v policy %d: batched %+v, single %+v", round, i, r, j, b, w)
						}
					}
					seen[rops[i]]++
				}
				// Whole tokens left in every bucket, and their expiry,
				// agree: a peek reads them. SETEX takes whole seconds
				// (rounded up), so two expiries set slack apart may read
				// up to a second more apart.
				for subj := range 3 {
					for _, n := range []string{"x", "y", "z"} {
						bk, sk := batched.Key(bucket.HashSubject(fmt.Sprint("s", subj)), n), single.Key(bucket.HashSubject(fmt.Sprint("s", subj)), n)
						bt, st := c.PTTL(ctx, bk).Val(), c.PTTL(ctx, sk).Val()
						if (bt - st).Abs() > slack+time.Second {
							t.Fatalf("round %d: %s expires in %v, %s in %v", round, bk, bt, sk, st)
						}
					}
				}
			}
			if seen[bucket.OpTake] < 100 || seen[bucket.OpPeek] < 30 || seen[bucket.OpRefund] < 30 {
				t.Fatalf("operations decided: %v", seen)
			}
		})
	}
}

// TestBatchBounds: a sender takes at most maxBatch requests or
// maxBatchKeys keys into one call (at least one request), leaves out
// requests whose callers are gone, and keeps the rest in order.
func TestBatchBounds(t *testing.T) {
	t.Parallel()
	s := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), defaultPrefix)
	var limits []NamedLimit
	for i := range 32 {
		limits = append(limits, NamedLimit{Name: fmt.Sprint("p", i), Limit: slow})
	}
	many := mustPolicies(t, limits...)
	one := mustPolicies(t, NamedLimit{Name: "one", Limit: slow})
	q := &queue{}
	for i := range 300 {
		r := &request{Ask: bucket.Ask{Subj: fmt.Sprint("k", i), N: 1, Policies: one}}
		r.gone.Store(i%100 == 7)
		q.waiting = append(q.waiting, r)
	}
	for range 200 {
		q.waiting = append(q.waiting, &request{Ask: bucket.Ask{Subj: "m", N: 1, Policies: many}})
	}
	var sizes []int
	for b := s.next(q, nil); b != nil; b = s.next(q, nil) {
		keys := 0
		for _, r := range b {
			if r.gone.Load() {
				t.Fatal("a request whose caller is gone was taken")
			}
			keys += len(r.Policies)
		}
		if len(b) > maxBatch || (len(b) > 1 && keys > maxBatchKeys) {
			t.Fatalf("batch of %d requests, %d keys", len(b), keys)
		}
		sizes = append(sizes, len(b))
	}
	if want := []int{256, 167, 74}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("batch sizes %v, want %v", sizes, want)
	}
}

// TestScriptReplayAfterOtherWrites (issue 22): a call re-sent after its
// reply was lost — go-redis's retry — is recognised even when another
// instance wrote the same buckets in between: it is charged nothing
// again and answered exactly as the first time (a charged request is
// never refused), for takes, refunds and a mixed batch.
func TestScriptReplayAfterOtherWrites(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			s := New(c, prefix)
			other := New(c, prefix) // another instance
			ps := mustPolicies(t, NamedLimit{Name: "a", Limit: slow})
			req := func(op, n int) *request {
				return &request{ctx: ctx, Ask: bucket.Ask{Subj: "k", Op: op, N: n, Policies: ps}}
			}
			for _, tc := range []struct {
				name  string
				batch []*request
				want  int64 // tokens left after the call and the other's take
			}{
				{"lone take", []*request{req(bucket.OpTake, 1)}, 5 - 1 - 1},
				{"batch of takes", []*request{req(bucket.OpTake, 1), req(bucket.OpTake, 2), req(bucket.OpTake, 1)}, 5 - 4 - 1},
				{"refund", []*request{req(bucket.OpRefund, 2)}, 5 - 3 + 2 - 1},
			} {
				if err := s.Reset(ctx, "k", ps); err != nil {
					t.Fatal(err)
				}
				if tc.name == "refund" {
					if _, err := s.Take(ctx, "k", 3, ps, nil); err != nil {
						t.Fatal(err)
					}
				}
				keys, args := s.encode(ctx, s.idSeq.Add(1), tc.batch)
				first, err := TokenBuckets.Run(ctx, c, keys, args...).Text()
				if err != nil {
					t.Fatal(err)
				}
				if o, err := other.Take(ctx, "k", 1, ps, nil); err != nil || !o.Allowed {
					t.Fatalf("%s: the other instance's take: %+v %v", tc.name, o, err)
				}
				again, err := TokenBuckets.Run(ctx, c, keys, args...).Text()
				if err != nil || again != first {
					t.Errorf("%s: re-sent call answered %q %v, first %q", tc.name, again, err, first)
				}
				o, err := s.Peek(ctx, "k", 1, ps, nil)
				if err != nil || o.Remaining != tc.want {
					t.Errorf("%s: %d tokens left (%v), want %d: the re-sent call was charged again", tc.name, o.Remaining, err, tc.want)
				}
			}
		})
	}
}

// TestScriptLimitChange (issue 22): a bucket written under one limit and
// read under another of the same name: what was spent carries over (new
// capacity − spent, clamped), across tick units too, and the key expires
// when the new limit's bucket would be full again.
func TestScriptLimitChange(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := New(c, redistest.Prefix(t))
			pol := func(l Limit) []bucket.Policy { return mustPolicies(t, NamedLimit{Name: "q", Limit: l}) }
			for _, tc := range []struct {
				name      string
				from, to  Limit
				spend     int
				wantLeft  int64
				wantAllow bool
				maxPTTL   time.Duration
			}{
				{"raise within µs", PerMinute(60), PerMinute(100), 40, 60 - 1, true, time.Minute},
				{"lower within µs", PerMinute(100), PerMinute(60), 70, 0, false, time.Minute + 2*time.Second},
				{"raise across units", PerDay(100000), PerDay(123457), 50000, 73457 - 1, true, 24 * time.Hour},
				{"lower across units", PerDay(123457), PerDay(100000), 100000, 0, false, 24*time.Hour + 2*time.Second},
				{"same limit", PerHour(7), PerHour(7), 3, 3, true, time.Hour},
			} {
				subj := "s-" + tc.name
				if tc.spend > 0 {
					if o, err := s.Take(ctx, subj, tc.spend, pol(tc.from), nil); err != nil || !o.Allowed {
						t.Fatalf("%s: spending %d: %+v %v", tc.name, tc.spend, o, err)
					}
				}
				o, err := s.Take(ctx, subj, 1, pol(tc.to), nil)
				if err != nil || o.Allowed != tc.wantAllow || o.Remaining != tc.wantLeft {
					t.Errorf("%s: %+v %v; want allowed %v with %d left", tc.name, o, err, tc.wantAllow, tc.wantLeft)
				}
				if !tc.wantAllow && (o.RetryAfter <= 0 || o.RetryAfter > tc.to.Period) {
					t.Errorf("%s: RetryAfter %v", tc.name, o.RetryAfter)
				}
				if pttl := c.PTTL(ctx, s.Key(bucket.HashSubject(subj), "q")).Val(); pttl <= 0 || pttl > tc.maxPTTL+time.Second {
					t.Errorf("%s: PTTL %v, want at most %v", tc.name, pttl, tc.maxPTTL+time.Second)
				}
			}
		})
	}
}

// TestScriptClockSteps (issue 22): the Redis clock jumps an hour ahead and
// is corrected. The jump refills at most one burst; after the correction
// the buckets stamped in the future are re-stamped, and no refusal lasts
// longer than the RetryAfter it announced.
func TestScriptClockSteps(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	s := New(c, defaultPrefix)
	ps := mustPolicies(t, NamedLimit{Name: "s", Limit: PerSecond(10)})
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	take := func(at time.Duration, n int) bucket.Outcome {
		t.Helper()
		m.SetTime(t0.Add(at))
		o, err := s.Take(ctx, "k", n, ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := take(0, 10); !o.Allowed {
		t.Fatalf("the burst: %+v", o)
	}
	if o := take(time.Hour, 10); !o.Allowed {
		t.Fatalf("an hour ahead, a full bucket: %+v", o)
	}
	for _, back := range []time.Duration{time.Second, -10 * time.Second} {
		o := take(back, 1)
		if o.Allowed || o.RetryAfter <= 0 || o.RetryAfter > 100*time.Millisecond {
			t.Fatalf("clock back at %v: %+v; want denied for at most 100ms", back, o)
		}
		if o2 := take(back+o.RetryAfter, 1); !o2.Allowed {
			t.Errorf("clock back at %v, %v later (the RetryAfter announced): %+v; the bucket froze", back, o.RetryAfter, o2)
		}
		take(back+o.RetryAfter, 1) // drain again before the next step
	}
}
