package core_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestConcurrencyNoOverAdmission runs instances, each with its own client,
// store and Concurrency and 4 goroutines, on one key of the shared Redis:
// at no moment do more than Max of their requests hold a slot.
func TestConcurrencyNoOverAdmission(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	for _, instances := range []int{1, 16, 64} {
		t.Run(strconv.Itoa(instances), func(t *testing.T) {
			const max, rounds, perInstance = 3, 20, 4
			var g gauge
			var timedOut atomic.Int64
			var wg sync.WaitGroup
			for i := range instances {
				client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: perInstance})
				t.Cleanup(func() { client.Close() })
				warmPool(t, client, perInstance)
				c := mustConcurrency(t, core.ConcurrencyConfig{
					Store: core.NewRedisStore(client, core.WithPrefix(prefix)), Name: "over-" + strconv.Itoa(instances),
					Max: max, FailMode: core.FailClosed, Lease: 10 * time.Second,
					Timeout: time.Second,
					// The property is over-admission: a loaded -race run
					// (256 goroutines) may take an acquire past Timeout,
					// refused by FailClosed, which admits nothing. Any
					// other failure is one.
					Observer: onStoreError(func(err error) {
						if errors.Is(err, core.ErrTimeout) {
							timedOut.Add(1)
							return
						}
						t.Errorf("instance %d: %v", i, err)
					}),
				})
				for range perInstance {
					wg.Go(func() { g.serve(t, c, "hot", rounds, true) })
				}
			}
			wg.Wait()
			if p := g.peak.Load(); p > max {
				t.Fatalf("%d requests in flight at once, Max %d", p, max)
			}
			if g.admitted.Load() == 0 {
				t.Fatal("nothing admitted")
			}
			t.Logf("%d instances: peak %d in flight (Max %d), %d of %d admitted, %d timed out", instances, g.peak.Load(), max, g.admitted.Load(), instances*perInstance*rounds, timedOut.Load())
		})
	}
}

// warmPool opens n connections of client, so that a test's first calls
// do not all dial at once.
func warmPool(t *testing.T, client *redis.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = client.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatalf("warming the pool: %v", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

// TestConcurrencyCrashFreesSlots: while an instance renews, its long
// requests keep their slots for 10 Leases; once it dies (stops
// renewing, releases nothing), the slots are free within one Lease.
func TestConcurrencyCrashFreesSlots(t *testing.T) {
	client := redistest.Client(t)
	store := core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t)))
	const lease = 300 * time.Millisecond
	// Timeout at its most for this Lease (a third): a renewal or acquire
	// slowed past it by a loaded -race run is degraded, not a leak.
	cfg := core.ConcurrencyConfig{Store: store, Name: "crash", Max: 2, FailMode: core.FailClosed, Lease: lease, Timeout: lease / 3}
	other := mustConcurrency(t, cfg)
	renewals := &renewalCounter{}
	cfg.Observer = renewals
	dying := mustConcurrency(t, cfg)
	ctx := context.Background()
	for range 2 {
		l, _ := acquire(t, dying, "k", true)
		l.KeepAlive()
	}
	// Kept by renewal for 10 Leases. A degraded refusal (FailClosed)
	// takes no slot: it is counted, not a failure.
	degraded := 0
	for end := time.Now().Add(10 * lease); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		l, res, _ := other.Acquire(ctx, "k")
		if l != nil {
			t.Fatalf("a slot of a renewed lease was taken %v in: %+v", 10*lease-time.Until(end), res)
		}
		if res.Degraded {
			degraded++
		}
	}
	t.Logf("2 long requests kept their slots for %v (10 Leases) by %d lease renewals (%d acquires degraded meanwhile)", 10*lease, renewals.n.Load(), degraded)
	core.Crash(dying)
	crashed := time.Now()
	for {
		if l, _, _ := other.Acquire(ctx, "k"); l != nil {
			break
		}
		if time.Since(crashed) > lease+time.Second {
			t.Fatalf("slot still held %v after the holder died (Lease %v)", time.Since(crashed), lease)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("slot free %v after the holder stopped renewing (Lease %v)", time.Since(crashed).Round(time.Millisecond), lease)
}

// TestConcurrencyOnRedis checks the scripts on a real Redis, whose Lua
// differs from miniredis's: a re-sent acquire adds one member, the key
// expires with its last lease and goes with its last release, a renewal
// after the deadline brings nothing back, a release removes only its own id.
func TestConcurrencyOnRedis(t *testing.T) {
	client := redistest.Client(t)
	store := core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t)))
	ctx := context.Background()
	const lease = 90 * time.Millisecond
	warm(t, store) // a cold client's dial and NOSCRIPT would not fit in 30 ms on a loaded machine
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: store, Name: "script", Max: 2, Lease: lease, Timeout: 30 * time.Millisecond})
	key := core.LeaseKey(store, "script", "k")
	card := func() int64 { return client.ZCard(ctx, key).Val() }

	a, _, err := core.AcquireWithID(c, ctx, "k", "resent")
	if err != nil || a == nil {
		t.Fatal(err)
	}
	if l, res, _ := core.AcquireWithID(c, ctx, "k", "resent"); l == nil || res.Remaining != 1 {
		t.Fatalf("re-sent acquire: %+v; want allowed, 1 slot left", res)
	}
	if got := card(); got != 1 {
		t.Fatalf("%d members after a re-sent acquire, want 1", got)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > lease {
		t.Fatalf("key TTL %v, want (0, %v]: it expires with its last lease", ttl, lease)
	}
	b, _ := acquire(t, c, "k", true)
	_, res := acquire(t, c, "k", false)
	if res.RetryAfter <= 0 || res.RetryAfter > lease {
		t.Fatalf("refused: RetryAfter %v, want (0, %v]", res.RetryAfter, lease)
	}
	if err := core.ForgeLease(c, "k", "not-held").Release(ctx); err != nil || card() != 2 {
		t.Fatalf("release of an id not held: %v, %d members; want nil, 2", err, card())
	}
	if err := b.Release(ctx); err != nil || card() != 1 {
		t.Fatalf("release: %v, %d members; want nil, 1", err, card())
	}
	if ok, err := core.RenewOnce(c, a); !ok || err != nil {
		t.Fatalf("renewal of a live lease: %v, %v", ok, err)
	}
	time.Sleep(lease + 10*time.Millisecond) // Redis's clock: nothing to inject
	if ok, err := core.RenewOnce(c, a); ok || err != nil {
		t.Fatalf("renewal past the deadline: %v, %v; want not renewed", ok, err)
	}
	if n, err := client.Exists(ctx, key).Result(); n != 0 || err != nil {
		t.Fatalf("key still there (%d, %v) after its last lease ended", n, err)
	}
	l, _ := acquire(t, c, "k", true)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("key still there after its last lease was released")
	}
}

// tripCounter counts round trips: a command or a whole pipeline each.
type tripCounter struct{ n atomic.Int64 }

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// TestConcurrencyRoundTrips: acquire + release is 2 round trips; a
// request shorter than Lease/6 costs no renewal; renewals of many leases
// kept alive on one key are one call per round, not one per lease.
func TestConcurrencyRoundTrips(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { client.Close() })
	var calls tripCounter
	client.AddHook(&calls)
	c := mustConcurrency(t, core.ConcurrencyConfig{
		Store: core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t))), Name: "trips", Max: 50, Lease: 30 * time.Second,
	})
	ctx := context.Background()
	warm, _ := acquire(t, c, "warm-up", true) // loads the scripts (NOSCRIPT, then EVAL)
	warm.KeepAlive()
	core.RenewNow(c)
	_ = warm.Release(ctx)

	calls.n.Store(0)
	for range 10 {
		l, _ := acquire(t, c, "k", true)
		l.KeepAlive()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.n.Load(); got != 20 {
		t.Fatalf("10 requests took %d round trips, want 20 (acquire + release)", got)
	}

	var held []*core.Lease
	for _, key := range []string{"k", "k2"} {
		for range 20 {
			l, _ := acquire(t, c, key, true)
			l.KeepAlive()
			held = append(held, l)
		}
	}
	calls.n.Store(0)
	core.RenewNow(c)
	if got := calls.n.Load(); got != 1 {
		t.Fatalf("renewing 40 leases on 2 keys took %d calls, want 1", got)
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}

// TestConcurrencyReleaseOutlivesCaller: a request whose client went away
// (its context cancelled) still frees its slot.
func TestConcurrencyReleaseOutlivesCaller(t *testing.T) {
	client := redistest.Client(t)
	c := mustConcurrency(t, core.ConcurrencyConfig{
		Store: core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t))), Name: "gone", Max: 1,
	})
	ctx, cancel := context.WithCancel(context.Background())
	l, _, err := c.Acquire(ctx, "k")
	if err != nil || l == nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	acquire(t, c, "k", true)
}

// TestConcurrencyStalledRedis: a Redis that accepts and never answers
// never holds an acquire for the client's own 10 s read timeout: Timeout
// bounds it, whether the client honours deadlines itself or not. The
// bound checked is generous (CI is a loaded machine); how close to
// Timeout an acquire answers is bench's stall figure, not a test's.
func TestConcurrencyStalledRedis(t *testing.T) {
	addr := stalledServer(t)
	const timeout = 40 * time.Millisecond
	for _, inline := range []bool{true, false} {
		t.Run("ContextTimeoutEnabled="+strconv.FormatBool(inline), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: inline, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			t.Cleanup(func() { client.Close() })
			c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "stalled", Max: 1, FailMode: core.FailClosed, Timeout: timeout})
			var worst time.Duration
			for range 5 {
				start := time.Now()
				l, res, _ := c.Acquire(context.Background(), "k")
				worst = max(worst, time.Since(start))
				if l != nil || !res.Degraded {
					t.Fatalf("stalled store: %+v; want a degraded refusal", res)
				}
			}
			if worst > 2*time.Second {
				t.Fatalf("an acquire waited %v, Timeout %v", worst, timeout)
			}
			t.Logf("longest acquire %v (Timeout %v)", worst, timeout)
		})
	}
}

// TestConcurrencySplitStores runs leases on a Ring (two miniredis shards)
// and a Redis Cluster, where renewals go as one pipeline with a script
// call per key, and the script is first missing everywhere (NOSCRIPT).
func TestConcurrencySplitStores(t *testing.T) {
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"ring": func(t *testing.T) redis.UniversalClient {
			a, b := miniredis.RunT(t), miniredis.RunT(t)
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
			t.Cleanup(func() { ring.Close() })
			return ring
		},
		"cluster": func(t *testing.T) redis.UniversalClient {
			return startCluster(t).Client()
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			client := mk(t)
			store := core.NewRedisStore(client)
			c := mustConcurrency(t, core.ConcurrencyConfig{Store: store, Name: "split", Max: 1})
			ctx := context.Background()
			var held []*core.Lease
			keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			for _, k := range keys {
				l, _ := acquire(t, c, k, true)
				acquire(t, c, k, false)
				l.KeepAlive()
				held = append(held, l)
			}
			core.RenewNow(c)
			if got := core.Kept(c); got != len(keys) {
				t.Fatalf("%d of %d leases kept after a renewal, want all", got, len(keys))
			}
			// A lease whose set vanished (a failover that lost it) is gone
			// for good: the renewal does not bring it back.
			if err := client.Del(ctx, core.LeaseKey(store, "split", "a")).Err(); err != nil {
				t.Fatal(err)
			}
			core.RenewNow(c)
			if got := core.Kept(c); got != len(keys)-1 {
				t.Fatalf("%d leases kept, want %d: a lost lease is not renewed", got, len(keys)-1)
			}
			if n := client.Exists(ctx, core.LeaseKey(store, "split", "a")).Val(); n != 0 {
				t.Fatal("a renewal brought a lost lease back")
			}
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range keys {
				if n := client.Exists(ctx, core.LeaseKey(store, "split", k)).Val(); n != 0 {
					t.Fatalf("key of %q still there after its last release", k)
				}
			}
		})
	}
}

// renewalCounter is a LeaseObserver counting renewed leases.
type renewalCounter struct{ n atomic.Int64 }

func (*renewalCounter) Decision(core.DecisionEvent) {}
func (*renewalCounter) BreakerChange(string, bool)  {}
func (r *renewalCounter) Leases(e core.LeaseEvent)  { r.n.Add(int64(e.Renewed)) }
