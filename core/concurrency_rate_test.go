package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// rateStores are forEachLeaseStore's stores and a real Redis, whose Lua
// differs from miniredis's.
func forEachRateStore(t *testing.T, f func(t *testing.T, s core.Store)) {
	forEachLeaseStore(t, func(t *testing.T, s core.Store, _ func(time.Duration)) { f(t, s) })
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, core.NewRedisStore(redistest.Client(t), core.WithPrefix(redistest.Prefix(t))))
	})
}

// withRate returns a Concurrency of Max max holding a rate limit of lim
// on the same store, and that limiter.
func withRate(t testing.TB, s core.Store, max int, lim core.Limit) (*core.Concurrency, *core.Limiter) {
	t.Helper()
	rate, err := core.New(core.Config{Store: s, Limit: lim, Name: "exports-rate", FailMode: core.FailClosed, Timeout: time.Second, DenyCacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	return mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "exports", Max: max, Rate: rate}), rate
}

// tokens returns the tokens key has left under lim, taking none.
func tokens(t *testing.T, lim *core.Limiter, key string) int {
	t.Helper()
	r, err := lim.Peek(context.Background(), key, 1)
	if err != nil || r.Degraded {
		t.Fatalf("Peek: %+v, %v", r, err)
	}
	return r.Remaining
}

// TestConcurrencyRateAllOrNothing: a slot refused takes no token, a token
// refused holds no slot, and the Result says which refused.
func TestConcurrencyRateAllOrNothing(t *testing.T) {
	t.Parallel()
	forEachRateStore(t, rateAllOrNothing)
}

// TestConcurrencyRateSentinel is TestConcurrencyRateAllOrNothing through
// a Sentinel (failover) client.
func TestConcurrencyRateSentinel(t *testing.T) {
	client := redistest.StartSentinel(t).FailoverClient()
	t.Cleanup(func() { client.Close() })
	rateAllOrNothing(t, core.NewRedisStore(client))
}

func rateAllOrNothing(t *testing.T, s core.Store) {
	c, rate := withRate(t, s, 2, core.PerHour(3))
	ctx := context.Background()
	a, res := acquire(t, c, "k", true)
	if res.Name != "exports-rate" || res.Remaining != 2 || len(res.Policies) != 2 || res.Policies[1].Remaining != 1 {
		t.Fatalf("first acquire: %+v; want the rate's Result, 2 tokens left, then 1 slot free", res)
	}
	b, _ := acquire(t, c, "k", true)
	_, res = acquire(t, c, "k", false) // both slots held
	if res.Name != "exports" || res.RetryAfter <= 0 || res.Policies[0].RetryAfter != 0 || res.Policies[0].Remaining != 1 {
		t.Fatalf("refused by the slots: %+v; want Name exports, a RetryAfter, the rate's 1 token", res)
	}
	if got := tokens(t, rate, "k"); got != 1 {
		t.Fatalf("a refused slot took a token: %d left, want 1", got)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c3, _ := acquire(t, c, "k", true) // the last token
	for _, l := range []*core.Lease{b, c3} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, res = acquire(t, c, "k", false) // slots free, tokens gone
	if res.Name != "exports-rate" || res.RetryAfter <= 0 || res.Policies[1].Remaining != 2 || res.Policies[1].RetryAfter != 0 {
		t.Fatalf("refused by the rate: %+v; want Name exports-rate, a RetryAfter, 2 slots free", res)
	}
	if rs, ok := s.(*core.RedisStore); ok {
		if n, err := rs.Client().Exists(ctx, core.LeaseKey(rs, "exports", "k")).Result(); err != nil || n != 0 {
			t.Fatalf("a refused token left a lease set: EXISTS %d, %v", n, err)
		}
	}
	if got := tokens(t, rate, "k"); got != 0 {
		t.Fatalf("%d tokens left, want 0", got)
	}
}

// resend is a go-redis hook that sends every call of the script deciding
// a slot and its tokens twice, as go-redis does when the first reply is
// lost, and keeps both replies.
type resend struct {
	mu      sync.Mutex
	replies []string
}

func (*resend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || !strings.EqualFold(cmd.Name(), "evalsha") || args[1] != core.AcquireWithRateHash {
			return next(ctx, cmd)
		}
		for range 2 {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			// The slot's answer (allowed) and the tokens' (the reply kept
			// for a re-sent call); the lease times move on.
			v, _ := cmd.(*redis.Cmd).Slice()
			h.mu.Lock()
			h.replies = append(h.replies, fmt.Sprint(v[0], v[5]))
			h.mu.Unlock()
		}
		return nil
	}
}
func (*resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestConcurrencyRateResent: an acquire whose reply is lost and which
// go-redis sends again holds one slot, takes one token, and gets the
// answers of its first run.
func TestConcurrencyRateResent(t *testing.T) {
	t.Parallel()
	clients := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		},
		"redis": func(t *testing.T) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := mk(t)
			t.Cleanup(func() { client.Close() })
			s := core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t)))
			c, rate := withRate(t, s, 2, core.PerHour(5))
			acquire(t, c, "k", true) // loads the script: later calls are EVALSHA
			h := &resend{}
			client.AddHook(h)
			acquire(t, c, "k", true)
			if len(h.replies) != 2 || h.replies[0] != h.replies[1] {
				t.Fatalf("replies %q; want the same reply twice", h.replies)
			}
			if got := tokens(t, rate, "k"); got != 3 {
				t.Fatalf("%d tokens left after 2 acquires, one sent twice; want 3", got)
			}
			if n, err := client.ZCard(context.Background(), core.LeaseKey(s, "exports", "k")).Result(); err != nil || n != 2 {
				t.Fatalf("%d leases held, %v; want 2", n, err)
			}
		})
	}
}

// TestConcurrencyRateNoOverAdmission: instances with their own clients
// on one key never hold more than Max slots at once, and never take more
// tokens than the bucket holds; every token taken holds a slot.
func TestConcurrencyRateNoOverAdmission(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	const instances, perInstance, rounds, max, burst = 16, 4, 20, 3, 60
	var g gauge
	var wg sync.WaitGroup
	var rate *core.Limiter
	for range instances {
		client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: perInstance})
		t.Cleanup(func() { client.Close() })
		var c *core.Concurrency
		c, rate = withRate(t, core.NewRedisStore(client, core.WithPrefix(prefix)), max, core.PerHour(burst))
		for range perInstance {
			wg.Go(func() { g.serve(t, c, "hot", rounds, false) })
		}
	}
	wg.Wait()
	left := tokens(t, rate, "hot")
	t.Logf("%d instances: peak %d in flight (Max %d), %d admitted, %d of %d tokens left", instances, g.peak.Load(), max, g.admitted.Load(), left, burst)
	if p := g.peak.Load(); p > max {
		t.Fatalf("%d requests in flight at once, Max %d", p, max)
	}
	// 60 an hour refill one token a minute: none within this test.
	if got := g.admitted.Load(); got > burst || got+int64(left) != burst {
		t.Fatalf("%d admitted and %d tokens left; want admitted + left = %d", got, left, burst)
	}
}

// TestConcurrencyRateCluster runs the script on a Redis Cluster: the
// lease set and the buckets share a slot, long keys included.
func TestConcurrencyRateCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	client := cluster.Client()
	t.Cleanup(func() { client.Close() })
	s := core.NewRedisStore(client)
	c, rate := withRate(t, s, 1, core.PerHour(2))
	ctx := context.Background()
	if err := client.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		return core.LoadAcquireWithRate(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"alice", "bob", "carol", strings.Repeat("long key ", 20), "~tilde", "{braces}"}
	for _, key := range keys {
		var trips tripCounter
		client.AddHook(&trips)
		l, res, err := c.Acquire(ctx, key)
		if err != nil || l == nil || res.Degraded {
			t.Fatalf("Acquire(%q): %v, %+v, %v", key, l != nil, res, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := trips.n.Load(); got != 2 {
			t.Fatalf("Acquire + Release of %q: %d round trips, want 2", key, got)
		}
	}
	for _, key := range keys {
		_ = rate.Reset(ctx, key)
		l, res, err := c.Acquire(ctx, key)
		if err != nil || l == nil || res.Degraded {
			t.Fatalf("Acquire(%q): %v, %+v, %v", key, l != nil, res, err)
		}
		if _, res, _ := c.Acquire(ctx, key); res.Allowed || res.Name != "exports" {
			t.Fatalf("second Acquire(%q) while the slot is held: %+v; want refused by the slots", key, res)
		}
		if got := tokens(t, rate, key); got != 1 {
			t.Fatalf("%q: %d tokens left, want 1", key, got)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		acquire(t, c, key, true) // the last token
		// Both refuse: the Result is the longer wait, the rate's.
		_, res, _ = c.Acquire(ctx, key)
		if res.Allowed || res.Name != "exports-rate" || res.Policies[0].RetryAfter <= 0 || res.Policies[1].RetryAfter <= 0 {
			t.Fatalf("%q: %+v; want refused by both, the rate binding", key, res)
		}
	}
	t.Logf("%d keys on a 3-primary cluster: acquire + release 2 round trips each; all or nothing", len(keys))
}

// TestConcurrencyRateConfig: the Rate must share the Concurrency's store
// and have names of its own.
func TestConcurrencyRateConfig(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	rate, err := core.New(core.Config{Store: store, Limit: core.PerMinute(5), FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	_, err = core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "x", Max: 1, FailMode: core.FailOpen, Rate: rate})
	if !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("NewConcurrency with a Rate on another store: %v; want ErrInvalidConfig", err)
	}
	_, err = core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: rate.Name(), Max: 1, FailMode: core.FailOpen, Rate: rate})
	if !errors.Is(err, core.ErrInvalidConfig) {
		t.Fatalf("NewConcurrency named as its Rate: %v; want ErrInvalidConfig", err)
	}
}

// TestConcurrencyRateDegraded: with the store down, each limit's
// FailMode decides its part, all or nothing.
func TestConcurrencyRateDegraded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		slots, rate core.FailMode
		allowed     bool
		name        string
	}{
		{core.FailOpen, core.FailOpen, true, "exports-rate"},
		{core.FailClosed, core.FailOpen, false, "exports"},
		{core.FailOpen, core.FailClosed, false, "exports-rate"},
		{core.FailLocal, core.FailLocal, true, "exports-rate"},
	}
	for _, tt := range tests {
		t.Run(tt.slots.String()+"+"+tt.rate.String(), func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			t.Cleanup(func() { client.Close() })
			m.Close()
			s := core.NewRedisStore(client)
			rate, err := core.New(core.Config{Store: s, Limit: core.PerHour(1), Name: "exports-rate", FailMode: tt.rate, Instances: 1, Timeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "exports", Max: 1, FailMode: tt.slots, Instances: 1, Rate: rate, Timeout: 100 * time.Millisecond})
			l, res, err := c.Acquire(context.Background(), "k")
			if err != nil || (l != nil) != tt.allowed || res.Allowed != tt.allowed || !res.Degraded || res.Name != tt.name {
				t.Fatalf("Acquire: lease %v, %+v, %v; want allowed %v by %s, degraded", l != nil, res, err, tt.allowed, tt.name)
			}
			if tt.slots == core.FailLocal {
				// The in-process slot and token are both taken.
				if l2, res, _ := c.Acquire(context.Background(), "k"); l2 != nil || !res.Fallback {
					t.Fatalf("second local acquire: %+v", res)
				}
			}
			_ = l.Release(context.Background())
		})
	}
}
