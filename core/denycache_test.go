package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// countingStore counts the decisions that reach a store.
type countingStore struct {
	core.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, subject string, n int, ps []core.Policy, each []core.Outcome) (core.Outcome, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, subject, n, ps, each)
}

func (s *countingStore) Reset(ctx context.Context, subject string, ps []core.Policy) error {
	return s.Store.(core.Resetter).Reset(ctx, subject, ps)
}

// TestDenyCacheHotKeyFlood: a flood on one denied key reaches Redis about
// as often as tokens arrive, and admits no more and no less than the bucket.
func TestDenyCacheHotKeyFlood(t *testing.T) {
	c := redistest.Client(t)
	for _, cache := range []int{0, -1} {
		name := map[int]string{0: "cache", -1: "no-cache"}[cache]
		t.Run(name, func(t *testing.T) {
			s := &countingStore{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))}
			lim := core.Limit{Rate: 20, Period: time.Second, Burst: 5}
			l := mustNew(t, core.Config{Store: s, Limit: lim, FailMode: core.FailClosed, DenyCacheSize: cache, Timeout: time.Second, Logger: discard})
			var admitted, total atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < 700*time.Millisecond {
						res, err := l.Allow(context.Background(), "hot")
						if err != nil || res.Degraded {
							t.Errorf("got %+v %v", res, err)
							return
						}
						total.Add(1)
						if res.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			bound := int64(lim.Burst) + int64(el.Seconds()*float64(lim.Rate)) + 1
			t.Logf("%s: %d decisions, %d admitted (bound %d), %d store calls", name, total.Load(), admitted.Load(), bound, s.calls.Load())
			if admitted.Load() > bound {
				t.Fatalf("admitted %d > bound %d", admitted.Load(), bound)
			}
			// That the cache never denies longer than the bucket is proved
			// with stopped clocks in TestDenyCacheNeverLonger; here, on a
			// loaded machine, only the burst is a safe lower bound.
			if admitted.Load() < int64(lim.Burst) {
				t.Fatalf("admitted %d < burst %d", admitted.Load(), lim.Burst)
			}
			// Each token costs a few probes (a deadline is measured from
			// before the request left, so the first probe can be a hair
			// early), never one call per request.
			if cache == 0 && s.calls.Load() > 10*admitted.Load()+16 {
				t.Fatalf("%d store calls for %d admitted: the cache did not absorb the flood", s.calls.Load(), admitted.Load())
			}
		})
	}
}

// TestDenyCacheOtherCostGoesToStore: a cached denial answers only for the
// cost it was learnt for; any other cost's wait differs, so the store
// answers it.
func TestDenyCacheOtherCostGoesToStore(t *testing.T) {
	c := redistest.Client(t)
	s := &countingStore{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))}
	l := mustNew(t, core.Config{Store: s, Limit: core.PerHour(5), FailMode: core.FailClosed, Timeout: time.Second})
	ctx := context.Background()
	l.AllowN(ctx, "k", 3)
	if res, _ := l.AllowN(ctx, "k", 3); res.Allowed {
		t.Fatal("3 of 2 remaining allowed")
	}
	calls := s.calls.Load()
	if res, _ := l.AllowN(ctx, "k", 3); res.Allowed || s.calls.Load() != calls {
		t.Fatalf("cost 3 again: got %+v with %d new store calls, want a cached denial", res, s.calls.Load()-calls)
	}
	if res, _ := l.AllowN(ctx, "k", 4); res.Allowed || s.calls.Load() != calls+1 || res.RetryAfter < 23*time.Minute {
		t.Fatalf("cost 4 after a denied 3: got %+v with %d new store calls, want the store's denial, retry 24m", res, s.calls.Load()-calls)
	}
	calls = s.calls.Load()
	if res, _ := l.AllowN(ctx, "k", 2); !res.Allowed || s.calls.Load() != calls+1 {
		t.Fatalf("cost 2 after a denied 3: got %+v, want the store to allow it", res)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.AllowN(ctx, "k", 5); !res.Allowed {
		t.Fatalf("after Reset: got %+v, want allowed", res)
	}
}

// TestDenyCacheNeverLonger: with both clocks stopped, a cached denial ends
// exactly when the store would allow again, not a microsecond later.
func TestDenyCacheNeverLonger(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	var mono atomic.Int64
	advance := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		mono.Add(int64(d))
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	s := &countingStore{Store: core.NewRedisStore(c)}
	l := mustNew(t, core.Config{Store: s, Limit: core.Limit{Rate: 3, Period: time.Second, Burst: 1}, FailMode: core.FailClosed, Timeout: time.Second})
	core.SetClock(l, func() time.Duration { return time.Duration(mono.Load()) })
	ctx := context.Background()
	if res, _ := l.Allow(ctx, "k"); !res.Allowed {
		t.Fatal("first request denied")
	}
	// The next token is 333333.3µs away. Learnt from the allowed answer
	// (full in 333334µs, rounded up), the cache ends a microsecond early:
	// conservative, never late.
	res, _ := l.Allow(ctx, "k")
	if res.Allowed || s.calls.Load() != 1 || res.RetryAfter != 333333*time.Microsecond {
		t.Fatalf("second request: %+v after %d store calls; want a cached denial, retry 333333µs, 1 call", res, s.calls.Load())
	}
	advance(333332 * time.Microsecond)
	if res, _ := l.Allow(ctx, "k"); res.Allowed || s.calls.Load() != 1 || res.RetryAfter != time.Microsecond {
		t.Fatalf("2µs early: %+v after %d store calls; want a cached denial, retry 1µs", res, s.calls.Load())
	}
	advance(time.Microsecond)
	if res, _ := l.Allow(ctx, "k"); res.Allowed || s.calls.Load() != 2 || res.RetryAfter != time.Microsecond {
		t.Fatalf("1µs early: %+v after %d store calls; want the store to deny, retry 1µs", res, s.calls.Load())
	}
	advance(time.Microsecond)
	if res, _ := l.Allow(ctx, "k"); !res.Allowed || s.calls.Load() != 3 {
		t.Fatalf("on time: %+v after %d store calls; want the store to allow", res, s.calls.Load())
	}
}
