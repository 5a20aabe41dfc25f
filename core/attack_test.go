package core_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// Regression tests for issue 12's attacks: what a client does must never
// switch the limit off. Each is named after the attack it holds.

// errorCounter counts the degraded decisions a limiter reports.
type errorCounter struct{ n, open atomic.Int64 }

func (c *errorCounter) onError(err error) {
	c.n.Add(1)
	if errors.Is(err, core.ErrCircuitOpen) {
		c.open.Add(1)
	}
}

// TestAttackCancelledContext: a caller whose context is already cancelled
// (a client that closed or half-closed its connection) is decided by the
// store and counted, never let through as "store unavailable". Before the
// fix, 40 of 40 were allowed and none counted.
func TestAttackCancelledContext(t *testing.T) {
	for _, mode := range []core.FailMode{core.FailOpen, core.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			var errs errorCounter
			c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)}) // go-redis defaults
			defer c.Close()
			l := limitertest.New(t, core.Config{
				Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(3),
				FailMode: mode, Instances: 2, Observer: onStoreError(errs.onError), Timeout: 5 * time.Second, // no decision degraded by a loaded machine
			})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			allowed := 0
			for range 40 {
				res, err := l.Allow(ctx, "attacker")
				if err != nil || res.Degraded {
					t.Fatalf("cancelled caller: %+v %v; want the store's decision", res, err)
				}
				if res.Allowed {
					allowed++
				}
			}
			t.Logf("attack matrix: already-cancelled context, %v: %d of 40 allowed", mode, allowed)
			if allowed != 3 || errs.n.Load() != 0 {
				t.Fatalf("%d of 40 allowed, %d store errors reported; want 3 and 0", allowed, errs.n.Load())
			}
		})
	}
}

// TestAttackCancelledInFlight: the caller's context ends while its decision
// is on the way to Redis. The decision still completes and counts; with
// FailLocal the local bucket never decides a request the shared one also
// charged (before: 5 admitted of 12 against 3).
func TestAttackCancelledInFlight(t *testing.T) {
	var errs errorCounter
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
	defer c.Close()
	l := limitertest.New(t, core.Config{
		Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(3),
		FailMode: core.FailLocal, Instances: 1, Observer: onStoreError(errs.onError),
		Timeout: 5 * time.Second, // a property, not latency: a loaded machine must not degrade it
	})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(time.Duration(i*20) * time.Microsecond); cancel() }()
			if res, _ := l.Allow(ctx, "attacker"); res.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("attack matrix: context cancelled in flight, FailLocal: %d of 12 allowed", allowed.Load())
	if allowed.Load() != 3 || errs.n.Load() != 0 {
		t.Fatalf("%d of 12 allowed, %d store errors reported; want 3 and 0", allowed.Load(), errs.n.Load())
	}
}

// TestAttackShortDeadlineOpensBreaker: requests carrying a deadline of 1µs
// (a propagated client-chosen timeout) with the README's client options.
// Before the fix, three of them opened the circuit breaker and every other
// client was decided by FailMode (a victim got 95 × 503 in 2 s).
func TestAttackShortDeadlineOpensBreaker(t *testing.T) {
	var errs errorCounter
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
	defer c.Close()
	l := limitertest.New(t, core.Config{
		Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(1000),
		FailMode: core.FailClosed, Observer: onStoreError(errs.onError), Timeout: 5 * time.Second,
	})
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
		res, err := l.Allow(ctx, "attacker")
		cancel()
		if err != nil || res.Degraded || !res.Allowed {
			t.Fatalf("attacker's request %d: %+v %v; want the store's decision", i, res, err)
		}
	}
	victim := 0
	for range 20 {
		if res, _ := l.Allow(context.Background(), "victim"); res.Allowed && !res.Degraded {
			victim++
		}
	}
	t.Logf("attack matrix: 50 requests with a 1µs deadline: %d store errors; victim served %d of 20", errs.n.Load(), victim)
	if errs.n.Load() != 0 || victim != 20 {
		t.Fatalf("%d store errors, victim served %d of 20; want 0 and 20", errs.n.Load(), victim)
	}
}

// TestAttackBurstOpensBreaker: 1 500 concurrent decisions on fresh keys
// against a healthy Redis. Before the redesign the breaker stayed open for
// 47–75 % of such a flood and 98–100 % of its decisions went through
// unchecked; now they travel in batches and every one is Redis's. Timeout
// is a generous 5 s, so a loaded -race run cannot degrade a decision: the
// property is that none is decided by FailMode; how fast a burst is
// decided is for benchmarks.
func TestAttackBurstOpensBreaker(t *testing.T) {
	var errs errorCounter
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer c.Close()
	l := limitertest.New(t, core.Config{
		Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(3),
		FailMode: core.FailClosed, Observer: onStoreError(errs.onError), Timeout: 5 * time.Second,
	})
	if res, _ := l.Allow(context.Background(), "warm-up"); res.Degraded {
		t.Fatal("Redis not answering before the burst")
	}
	degraded := burst(l, 1500, "fresh-")
	t.Logf("attack matrix: burst of 1500 concurrent decisions on fresh keys: %d degraded, %d with the breaker open", degraded, errs.open.Load())
	if degraded != 0 || errs.n.Load() != 0 {
		t.Fatalf("%d of 1500 decisions degraded, %d store errors (%d with the breaker open); want 0", degraded, errs.n.Load(), errs.open.Load())
	}
}

// burst makes n decisions on fresh keys at once and returns how many
// were degraded.
func burst(l *core.Limiter, n int, prefix string) int64 {
	var degraded atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if res, _ := l.Allow(context.Background(), prefix+strconv.Itoa(i)); res.Degraded {
				degraded.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return degraded.Load()
}

// TestAttackLongKeys: keys of 256 KiB (a custom KeyFunc, DecideKey, a
// direct AllowN) cost bounded memory in every store, in the denial cache
// and in FailLocal's buckets: the limiter hands every store a digest.
// Before, each request retained its 264 KiB key.
func TestAttackLongKeys(t *testing.T) {
	rec := &recordingStore{}
	l := limitertest.New(t, core.Config{Store: rec.store(), Limit: core.PerMinute(3), FailMode: core.FailOpen})
	long := strings.Repeat("k", 256<<10)
	if _, err := l.Allow(context.Background(), long); err != nil {
		t.Fatal(err)
	}
	if got := rec.longest.Load(); got > 64 {
		t.Fatalf("the store saw a %d-byte key; want at most 64", got)
	}

	// FailLocal's in-process buckets and the memory store, measured.
	for name, cfg := range map[string]core.Config{
		"memory": {Store: core.NewMemoryStore(), Limit: core.PerMinute(3), FailMode: core.FailOpen},
		"FailLocal": {Store: limitertest.NewDownStore(), Limit: core.PerMinute(3), FailMode: core.FailLocal, Instances: 1,
			DenyCacheSize: -1, BreakerFailures: 1 << 30},
	} {
		t.Run(name, func(t *testing.T) {
			l := limitertest.New(t, cfg)
			const keys = 64
			before := heapInUse()
			for i := range keys {
				k := strconv.Itoa(i) + long
				if _, err := l.Allow(context.Background(), k); err != nil {
					t.Fatal(err)
				}
			}
			grew := heapInUse() - before
			t.Logf("attack matrix: %d keys of 256 KiB through %s: heap grew %d KiB", keys, name, grew>>10)
			if grew > 4<<20 { // the raw keys alone would hold 16 MiB
				t.Fatalf("heap grew %d KiB for %d long keys; the keys are kept", grew>>10, keys)
			}
			runtime.KeepAlive(l)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// recordingStore notes the longest subject a store was given.
type recordingStore struct {
	longest atomic.Int64
}

// store returns a store deciding in a MemoryStore, noting subjects.
func (s *recordingStore) store() core.Store {
	return fakestore.Over(core.NewMemoryStore(), func(_ context.Context, c bucket.Ask) error {
		if l := int64(len(c.Subj)); l > s.longest.Load() {
			s.longest.Store(l)
		}
		return nil
	})
}
