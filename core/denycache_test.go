package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// countingStore counts the decisions that reach a store.
type countingStore struct {
	inner core.Store
	calls atomic.Int64
}

// store returns a store deciding in s.inner, counting its takes.
func (s *countingStore) store() core.Store {
	return fakestore.Over(s.inner, func(_ context.Context, c bucket.Ask) error {
		if c.Op == bucket.OpTake {
			s.calls.Add(1)
		}
		return nil
	})
}

// TestDenyCacheHotKeyFlood: a flood on one denied key reaches Redis about
// as often as tokens arrive, and admits no more and no less than the bucket.
func TestDenyCacheHotKeyFlood(t *testing.T) {
	c := redistest.Client(t)
	for _, cache := range []int{0, -1} {
		name := map[int]string{0: "cache", -1: "no-cache"}[cache]
		t.Run(name, func(t *testing.T) {
			s := &countingStore{inner: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))}
			lim := core.Limit{Rate: 20, Period: time.Second, Burst: 5}
			l := limitertest.New(t, core.Config{Store: s.store(), Limit: lim, FailMode: core.FailClosed, DenyCacheSize: cache, Timeout: time.Second})
			got := limitertest.Flood{Key: "hot", Goroutines: 8, For: 700 * time.Millisecond}.Run(t, l)
			bound := limitertest.Bound(lim, got.Elapsed) + 1
			t.Logf("%s: %d decisions, %d admitted (bound %d), %d store calls", name, got.Decisions(), got.Admitted, bound, s.calls.Load())
			if got.Degraded != 0 {
				t.Fatalf("%d of %d decisions degraded", got.Degraded, got.Decisions())
			}
			if got.Admitted > bound {
				t.Fatalf("admitted %d > bound %d", got.Admitted, bound)
			}
			// That the cache never denies longer than the bucket is proved
			// with stopped clocks in TestDenyCacheNeverLonger; here, on a
			// loaded machine, only the burst is a safe lower bound.
			if got.Admitted < int64(lim.Burst) {
				t.Fatalf("admitted %d < burst %d", got.Admitted, lim.Burst)
			}
			// Each token costs a few probes (a deadline is measured from
			// before the request left, so the first probe can be a hair
			// early), never one call per request.
			if cache == 0 && s.calls.Load() > 10*got.Admitted+16 {
				t.Fatalf("%d store calls for %d admitted: the cache did not absorb the flood", s.calls.Load(), got.Admitted)
			}
		})
	}
}

// TestDenyCacheOtherCostGoesToStore: a cached denial answers only for the
// cost it was learnt for; any other cost's wait differs, so the store
// answers it.
func TestDenyCacheOtherCostGoesToStore(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := &countingStore{inner: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))}
	l := limitertest.New(t, core.Config{Store: s.store(), Limit: core.PerHour(5), FailMode: core.FailClosed, Timeout: time.Second})
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
	t.Parallel()
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
	s := &countingStore{inner: core.NewRedisStore(c)}
	l := limitertest.New(t, core.Config{Store: s.store(), Limit: core.Limit{Rate: 3, Period: time.Second, Burst: 1}, FailMode: core.FailClosed, Timeout: time.Second})
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

// TestDenyCacheAnswersAsTheStore: with both clocks stopped and moved
// together, every cached answer equals, field for field, what the store
// answers the same request (a limiter without the cache sharing the
// buckets): for the cost asked, and with several limits, every limit's
// part, each caller with its own Policies. Before, AllowN(5) after a
// cached denial of 1 said RetryAfter 1s instead of 5s, and a cached
// multi-limit denial said 0 for its binding limit.
func TestDenyCacheAnswersAsTheStore(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	var mono atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	store := core.NewRedisStore(c)
	mk := func(cache int) (*core.Limiter, *countingStore) {
		s := &countingStore{inner: store}
		l := limitertest.New(t, core.Config{
			Store: s.store(), Name: "sec", Limit: core.Limit{Rate: 1, Period: time.Second, Burst: 5},
			Extra:    []core.NamedLimit{{Name: "hour", Limit: core.PerHour(8)}},
			FailMode: core.FailClosed, Timeout: time.Second, DenyCacheSize: cache,
		})
		core.SetClock(l, func() time.Duration { return time.Duration(mono.Load()) })
		return l, s
	}
	cached, counted := mk(0)
	plain, _ := mk(-1)
	ctx := context.Background()
	step := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		mono.Add(int64(d))
	}
	same := func(what string, n int, wantCached bool) {
		t.Helper()
		calls := counted.calls.Load()
		got, _ := cached.AllowN(ctx, "k", n)
		fromCache := counted.calls.Load() == calls
		want, _ := plain.AllowN(ctx, "k", n)
		if got.Allowed || want.Allowed {
			t.Fatalf("%s: cached %+v, store %+v; want both denied", what, got, want)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || fromCache != wantCached {
			t.Fatalf("%s (from the cache: %v, want %v):\n cached %+v\n store  %+v", what, fromCache, wantCached, got, want)
		}
		got.Policies[0].RetryAfter = -1 // each caller owns its slice
	}
	if r, _ := cached.AllowN(ctx, "k", 5); !r.Allowed {
		t.Fatal("first AllowN(5) denied")
	}
	same("AllowN(1): the entry learnt from AllowN(5) is for cost 5", 1, false)
	same("AllowN(1) again", 1, true)
	step(300 * time.Millisecond)
	same("AllowN(1) 300ms on", 1, true)
	same("AllowN(5) after cached denials of 1", 5, false)
	same("AllowN(5) again", 5, true)
	step(5 * time.Second)
	if r, _ := cached.AllowN(ctx, "k", 3); !r.Allowed {
		t.Fatal("AllowN(3) with the bucket full denied")
	}
	// 8 an hour: 5 + 3 taken, so "hour" binds for 7m30s while "sec" has 2.
	same("AllowN(1) with the hour spent", 1, false)
	step(time.Minute)
	same("AllowN(1) a minute on", 1, true)
}

// TestDenyCacheAlternatingLimits (issue 36, item 5; DESIGN §3: the denial
// cache is keyed by the limit it answered for): a client alternating two
// routes that give its key two limits (AllowLimit, as WithLimitFunc
// calls it) is denied from the cache under each. Before, the cache kept
// one entry per key, for the last limit only: 400 of 400 refusals went to
// the store (0 with one limit).
func TestDenyCacheAlternatingLimits(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	s := &countingStore{inner: core.NewRedisStore(c)}
	l := limitertest.New(t, core.Config{Store: s.store(), Limit: core.PerHour(5), FailMode: core.FailClosed, Timeout: time.Second})
	ctx := context.Background()
	routes := []core.Limit{core.PerHour(5), core.PerHour(10)}
	for range 10 {
		if res, _ := l.AllowLimit(ctx, "k", 1, routes[1]); !res.Allowed {
			t.Fatalf("spending the bucket: %+v", res)
		}
	}
	calls := s.calls.Load()
	for i := range 400 {
		res, err := l.AllowLimit(ctx, "k", 1, routes[i%2])
		if err != nil || res.Allowed || res.Degraded || res.Limit != routes[i%2] {
			t.Fatalf("request %d under %v: %+v, %v; want denied under it", i, routes[i%2], res, err)
		}
	}
	// The first denial under 5/h is the store's: the last allowed
	// request left none under 10/h.
	t.Logf("%d of 400 refusals under alternating limits asked the store", s.calls.Load()-calls)
	if got := s.calls.Load() - calls; got > 1 {
		t.Errorf("%d of 400 refusals asked the store, want at most 1", got)
	}
}
