package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestPlainBatchMatchesGeneral: a batch of plain takes goes in the short
// form (three arguments), decided in a straight line up to the first
// bucket the line cannot decide (written under another limit, stamped
// ahead of the clock, with a loan out), the rest in the general form. It
// answers, writes and expires as the general form does: on a miniredis
// whose clock stands still, to the byte; on Redis, to the token.
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
				if err := c.Set(ctx, s.Key(bucket.HashSubject("g"), "p"), ahead, time.Hour).Err(); err != nil {
					t.Fatal(err)
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
				sb, lb := batch(), batch()
				keys, args := short.encodeShort(ctx, short.idSeq.Add(1), sb)
				if len(args) != 3 {
					t.Fatalf("round %d: %d arguments; want the short form's 3", round, len(args))
				}
				reply, err := TokenBuckets.Run(ctx, c, keys, args...).Text()
				short.settle(ctx, sb, 0, reply, err)
				keys, args = long.encode(ctx, long.idSeq.Add(1), lb)
				reply, err = TokenBuckets.Run(ctx, c, keys, args...).Text()
				long.settle(ctx, lb, 0, reply, err)
				for i, subj := range subjs {
					var ge, we [1]bucket.Outcome
					g, err1 := ParseReply(sb[i].reply, ge[:])
					w, err2 := ParseReply(lb[i].reply, we[:])
					if err1 != nil || err2 != nil || g.Allowed != w.Allowed || g.Remaining != w.Remaining {
						t.Fatalf("round %d, %c: short %q %v, general %q %v", round, subj, sb[i].reply, err1, lb[i].reply, err2)
					}
					sk, lk := short.Key(sb[i].Subj, "p"), long.Key(lb[i].Subj, "p")
					sv, lv := c.Get(ctx, sk).Val(), c.Get(ctx, lk).Val()
					st, lt := c.PTTL(ctx, sk).Val(), c.PTTL(ctx, lk).Val()
					if name == "miniredis" && (sb[i].reply != lb[i].reply || sv != lv || st != lt) {
						t.Fatalf("round %d, %c: short %q %q %v, general %q %q %v", round, subj, sb[i].reply, sv, st, lb[i].reply, lv, lt)
					}
					if d := st - lt; d < -time.Second || d > time.Second {
						t.Errorf("round %d, %c: expiry %v short, %v general", round, subj, st, lt)
					}
				}
			}
		})
	}
}
