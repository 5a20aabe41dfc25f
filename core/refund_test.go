package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestPeekAndRefund: on every store, Peek tells what AllowN would answer
// and takes nothing; Refund gives tokens back to every limit, capped at
// the burst.
func TestPeekAndRefund(t *testing.T) {
	forStores(t, stores(t), func(t *testing.T, cs clockStore) {
		l := limitertest.New(t, core.Config{
			Store: cs.store, Name: "min", Limit: core.PerMinute(3),
			Extra:    []core.NamedLimit{{Name: "hour", Limit: core.PerHour(5)}},
			FailMode: core.FailClosed, Timeout: time.Second, DenyCacheSize: -1,
		})
		ctx := context.Background()
		check := func(what string, r core.Result, err error, allowed bool, rem int, hourRem int) {
			t.Helper()
			if err != nil || r.Degraded || r.Allowed != allowed || r.Remaining != rem || r.Policies[1].Remaining != hourRem {
				t.Fatalf("%s: %+v %v; want allowed %v, %d left, %d left this hour", what, r, err, allowed, rem, hourRem)
			}
		}
		r, err := l.Peek(ctx, "k", 3)
		check("peek at a full bucket", r, err, true, 3, 5)
		r, err = l.Peek(ctx, "k", 3)
		check("peek again: nothing was taken", r, err, true, 3, 5)
		r, err = l.AllowN(ctx, "k", 3)
		check("take 3", r, err, true, 0, 2)
		r, err = l.Peek(ctx, "k", 1)
		check("peek at an empty bucket", r, err, false, 0, 2)
		if r.RetryAfter <= 0 || r.RetryAfter > 20*time.Second {
			t.Fatalf("peek's RetryAfter %v; want the wait for a token, at most 20s", r.RetryAfter)
		}
		r, err = l.Refund(ctx, "k", 2)
		check("refund 2", r, err, true, 2, 4)
		r, err = l.AllowN(ctx, "k", 2)
		check("take the refunded 2", r, err, true, 0, 2)
		r, err = l.Refund(ctx, "k", 3)
		check("refund 3", r, err, true, 3, 5)
		r, err = l.Refund(ctx, "k", 3)
		check("refund above the burst is capped", r, err, true, 3, 5)
		r, err = l.AllowN(ctx, "k", 3)
		check("take 3 again", r, err, true, 0, 2)
		r, err = l.Refund(ctx, "k", 100)
		check("refund of 100, above every burst: gives back the smallest burst", r, err, true, 3, 5)
	})
}

// TestRefundRoundTrips: a Peek and a Refund are one script call each.
func TestRefundRoundTrips(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer c.Close()
	var calls atomic.Int64
	c.AddHook(callCounter{&calls})
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(3), FailMode: core.FailClosed, Timeout: time.Second})
	ctx := context.Background()
	if err := core.NewRedisStore(c).Preload(ctx); err != nil { // connection and script ready
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		f    func() (core.Result, error)
	}{
		{"peek", func() (core.Result, error) { return l.Peek(ctx, "k", 1) }},
		{"refund", func() (core.Result, error) { return l.Refund(ctx, "k", 1) }},
		{"allow", func() (core.Result, error) { return l.Allow(ctx, "k") }},
	} {
		before := calls.Load()
		if r, err := op.f(); err != nil || r.Degraded {
			t.Fatalf("%s: %+v %v", op.name, r, err)
		}
		t.Logf("%s: %d round trip(s)", op.name, calls.Load()-before)
		if got := calls.Load() - before; got != 1 {
			t.Errorf("%s: %d round trips, want 1", op.name, got)
		}
	}
}

// TestRefundExact: many instances take and refund concurrently on one
// key; whatever the interleaving, the cost kept (taken less refunded)
// never exceeds what the bucket allows: refunds give back only what was
// taken, capped at the burst.
func TestRefundExact(t *testing.T) {
	prefix := redistest.Prefix(t)
	lim := core.PerHour(20)
	var kept atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		defer c.Close()
		l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Name: "x", Limit: lim, FailMode: core.FailClosed, Timeout: 5 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				r, _ := l.Allow(context.Background(), "k")
				if !r.Allowed {
					continue
				}
				if (i+j)%2 == 0 {
					l.Refund(context.Background(), "k", 1)
					continue
				}
				kept.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("8 instances, 400 attempts, every other admitted one refunded: %d kept (burst %d)", kept.Load(), lim.Burst)
	if kept.Load() > int64(lim.Burst)+1 { // +1: an hour's refill during the test is < 1 token
		t.Fatalf("%d kept, more than the burst %d", kept.Load(), lim.Burst)
	}
	if kept.Load() < int64(lim.Burst) {
		t.Fatalf("%d kept: refunded tokens were lost", kept.Load())
	}
}

// callCounter counts the commands a client sends.
type callCounter struct{ n *atomic.Int64 }

func (callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
