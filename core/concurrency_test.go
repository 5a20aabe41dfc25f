package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// leaseStores are the stores whose clock a test moves: a MemoryStore with
// an injected clock, and a RedisStore on miniredis, whose TIME is set.
var leaseStores = map[string]func(t *testing.T) (core.Store, func(time.Duration)){
	"memory": func(t *testing.T) (core.Store, func(time.Duration)) {
		var mu sync.Mutex
		now := time.Unix(1_700_000_000, 0)
		s := core.NewMemoryStore(core.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
		return s, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	},
	"miniredis": func(t *testing.T) (core.Store, func(time.Duration)) {
		m := miniredis.RunT(t)
		now := time.Unix(1_700_000_000, 0)
		m.SetTime(now)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return core.NewRedisStore(c), func(d time.Duration) { now = now.Add(d); m.SetTime(now) }
	},
}

const testLease = 30 * time.Second

func mustConcurrency(t testing.TB, cfg core.ConcurrencyConfig) *core.Concurrency {
	t.Helper()
	if cfg.FailMode == 0 {
		cfg.FailMode = core.FailClosed
	}
	if cfg.Lease == 0 {
		cfg.Lease = testLease
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	c, err := core.NewConcurrency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// acquire asks for a slot and checks whether it was granted.
func acquire(t *testing.T, c *core.Concurrency, key string, want bool) (*core.Lease, core.Result) {
	t.Helper()
	l, res, err := c.Acquire(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != want || (l != nil) != want || res.Degraded {
		t.Fatalf("Acquire(%q) = lease %v, %+v; want allowed %v", key, l != nil, res, want)
	}
	return l, res
}

func forEachLeaseStore(t *testing.T, f func(t *testing.T, s core.Store, advance func(time.Duration))) {
	for name, mk := range leaseStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, advance := mk(t)
			f(t, s, advance)
		})
	}
}

func TestConcurrencySlots(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "slots", Max: 2})
		a, res := acquire(t, c, "k", true)
		if res.Remaining != 1 || res.Limit.Capacity() != 2 || res.Name != "slots" || res.ResetAfter != testLease {
			t.Fatalf("first: %+v; want Remaining 1 of 2, ResetAfter %v", res, testLease)
		}
		advance(time.Second)
		b, res := acquire(t, c, "k", true)
		if res.Remaining != 0 {
			t.Fatalf("second: Remaining %d, want 0", res.Remaining)
		}
		advance(time.Second)
		_, res = acquire(t, c, "k", false)
		if got, want := res.RetryAfter, testLease-2*time.Second; got != want {
			t.Errorf("refused: RetryAfter %v, want %v (the earliest lease's end)", got, want)
		}
		if got, want := res.ResetAfter, testLease-time.Second; got != want {
			t.Errorf("refused: ResetAfter %v, want %v (the latest lease's end)", got, want)
		}
		acquire(t, c, "other", true) // keys are independent
		ctx := context.Background()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("second Release: %v, want nil", err)
		}
		acquire(t, c, "k", true)
		acquire(t, c, "k", false) // a's second Release freed nothing more
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var none *core.Lease
		if err := none.Release(ctx); err != nil {
			t.Fatalf("nil Release: %v", err)
		}
	})
}

func TestConcurrencySharedByName(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		a := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "shared", Max: 1})
		b := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "shared", Max: 1})
		other := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "other", Max: 1})
		acquire(t, a, "k", true)
		acquire(t, b, "k", false)
		acquire(t, other, "k", true)
	})
}

// TestConcurrencyLeaseEnds is the crash of a holder: a lease neither
// released nor renewed frees its slot at its deadline, not later.
func TestConcurrencyLeaseEnds(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "ends", Max: 1})
		acquire(t, c, "k", true)
		advance(testLease - time.Millisecond)
		acquire(t, c, "k", false)
		advance(time.Millisecond)
		acquire(t, c, "k", true)
	})
}

func TestConcurrencyRenewalKeepsSlot(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "renew", Max: 1})
		l, _ := acquire(t, c, "k", true)
		advance(testLease / 2)
		if ok, err := core.RenewOnce(c, l); !ok || err != nil {
			t.Fatalf("renewal of a live lease: %v, %v; want renewed", ok, err)
		}
		advance(testLease * 9 / 10) // 1.4 Leases since the acquire
		acquire(t, c, "k", false)
		advance(testLease / 10)
		acquire(t, c, "k", true)
	})
}

// TestConcurrencyRenewalNeverResurrects: a renewal that comes after the
// lease ended does not bring it back, even before any acquire pruned it,
// nor after another holder took the slot.
func TestConcurrencyRenewalNeverResurrects(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "late", Max: 1})
		l, _ := acquire(t, c, "k", true)
		advance(testLease)
		if ok, _ := core.RenewOnce(c, l); ok {
			t.Fatal("renewed a lease past its deadline")
		}
		b, _ := acquire(t, c, "k", true)
		if ok, _ := core.RenewOnce(c, l); ok {
			t.Fatal("renewed a lease whose slot is another's")
		}
		acquire(t, c, "k", false)
		if err := b.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		acquire(t, c, "k", true)
	})
}

// TestConcurrencyKeepAlive: the background renewal (here one round run by
// the test) keeps a kept lease; Release stops it.
func TestConcurrencyKeepAlive(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "kept", Max: 1})
		l, _ := acquire(t, c, "k", true)
		l.KeepAlive()
		l.KeepAlive()
		if got := core.Kept(c); got != 1 {
			t.Fatalf("kept %d leases, want 1", got)
		}
		for range 3 {
			advance(testLease * 9 / 10)
			core.RenewNow(c)
			acquire(t, c, "k", false)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := core.Kept(c); got != 0 {
			t.Fatalf("kept %d leases after Release, want 0", got)
		}
		acquire(t, c, "k", true)
	})
}

// TestConcurrencyResentAcquire is go-redis re-sending an acquire whose
// reply was lost: the same lease id twice holds one slot.
func TestConcurrencyResentAcquire(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "resent", Max: 2})
		ctx := context.Background()
		for i := range 2 {
			l, res, err := core.AcquireWithID(c, ctx, "k", "same-id")
			if err != nil || l == nil || !res.Allowed || res.Remaining != 1 {
				t.Fatalf("send %d: %v, %+v, %v; want allowed with 1 slot left", i+1, l != nil, res, err)
			}
		}
		acquire(t, c, "k", true)
		acquire(t, c, "k", false)
	})
}

// TestConcurrencyReleaseOnlyOwn: releasing an id that is not held frees
// no one's slot.
func TestConcurrencyReleaseOnlyOwn(t *testing.T) {
	t.Parallel()
	forEachLeaseStore(t, func(t *testing.T, s core.Store, advance func(time.Duration)) {
		c := mustConcurrency(t, core.ConcurrencyConfig{Store: s, Name: "own", Max: 1})
		acquire(t, c, "k", true)
		if err := core.ForgeLease(c, "k", "someone-else").Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		acquire(t, c, "k", false)
	})
}

func TestConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "bad", Max: 1})
	if l, _, err := c.Acquire(context.Background(), ""); !errors.Is(err, core.ErrEmptyKey) || l != nil {
		t.Fatalf("Acquire(\"\") = %v, %v; want ErrEmptyKey", l, err)
	}
	mem := core.NewMemoryStore()
	for _, tc := range []struct {
		name string
		cfg  core.ConcurrencyConfig
		want error
	}{
		{"no store", core.ConcurrencyConfig{Name: "x", Max: 1, FailMode: core.FailOpen}, core.ErrNoStore},
		{"no fail mode", core.ConcurrencyConfig{Store: mem, Name: "x", Max: 1}, core.ErrFailModeUnset},
		{"bad fail mode", core.ConcurrencyConfig{Store: mem, Name: "x", Max: 1, FailMode: 9}, core.ErrInvalidFailMode},
		{"no name", core.ConcurrencyConfig{Store: mem, Max: 1, FailMode: core.FailOpen}, core.ErrInvalidConfig},
		{"bad name", core.ConcurrencyConfig{Store: mem, Name: "a{b}", Max: 1, FailMode: core.FailOpen}, core.ErrInvalidConfig},
		{"no max", core.ConcurrencyConfig{Store: mem, Name: "x", FailMode: core.FailOpen}, core.ErrInvalidConfig},
		{"lease below 3 timeouts", core.ConcurrencyConfig{Store: mem, Name: "x", Max: 1, FailMode: core.FailOpen, Lease: 100 * time.Millisecond}, core.ErrInvalidConfig},
		{"negative timeout", core.ConcurrencyConfig{Store: mem, Name: "x", Max: 1, FailMode: core.FailOpen, Timeout: -1}, core.ErrInvalidConfig},
		{"local without instances", core.ConcurrencyConfig{Store: mem, Name: "x", Max: 1, FailMode: core.FailLocal}, core.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := core.NewConcurrency(tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("NewConcurrency: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestConcurrencyFailModes: with the store gone, FailOpen admits holding
// nothing, FailClosed refuses, FailLocal admits Max / Instances per key in
// this process; releases of such leases are local too.
func TestConcurrencyFailModes(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	m.Close()
	store := core.NewRedisStore(client)
	ctx := context.Background()
	var reported sync.Map
	cfg := func(mode core.FailMode) core.ConcurrencyConfig {
		return core.ConcurrencyConfig{Store: store, Name: "down-" + mode.String(), Max: 4, FailMode: mode, Instances: 2,
			Timeout: 200 * time.Millisecond, Observer: onStoreError(func(err error) { reported.Store(mode, err) })}
	}

	open := mustConcurrency(t, cfg(core.FailOpen))
	for range 6 {
		l, res, err := open.Acquire(ctx, "k")
		if err != nil || l == nil || !res.Allowed || !res.Degraded {
			t.Fatalf("FailOpen: %v, %+v, %v; want a degraded admission", l != nil, res, err)
		}
		l.KeepAlive() // holds nothing: nothing to renew
		if err := l.Release(ctx); err != nil {
			t.Fatalf("FailOpen release: %v", err)
		}
	}
	if core.Kept(open) != 0 {
		t.Fatal("FailOpen lease kept for renewal")
	}

	closed := mustConcurrency(t, cfg(core.FailClosed))
	l, res, err := closed.Acquire(ctx, "k")
	if err != nil || l != nil || res.Allowed || !res.Degraded || res.RetryAfter <= 0 {
		t.Fatalf("FailClosed: %v, %+v, %v; want a degraded refusal with RetryAfter", l != nil, res, err)
	}

	local := mustConcurrency(t, cfg(core.FailLocal))
	var held []*core.Lease
	for i := range 3 {
		l, res, err := local.Acquire(ctx, "k")
		if err != nil || !res.Degraded || !res.Fallback {
			t.Fatalf("FailLocal %d: %+v, %v; want decided by the fallback", i, res, err)
		}
		if got, want := l != nil, i < 2; got != want {
			t.Fatalf("FailLocal acquire %d: allowed %v, want %v (Max 4 / Instances 2)", i, got, want)
		}
		if l != nil {
			held = append(held, l)
		}
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := local.Acquire(ctx, "k"); l == nil {
		t.Fatal("FailLocal: a released local lease did not free its slot")
	}
	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed, core.FailLocal} {
		if _, ok := reported.Load(mode); !ok {
			t.Errorf("%v: no degraded decision observed", mode)
		}
	}
}

// leaseObserver records what an Observer is told.
type leaseObserver struct {
	mu       sync.Mutex
	events   []core.DecisionEvent
	breakers []bool
}

func (o *leaseObserver) Decision(e core.DecisionEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *leaseObserver) BreakerChange(_ string, open bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.breakers = append(o.breakers, open)
}

// TestConcurrencyObserver: every acquire is a Decision under the
// Concurrency's Name; a failing store's acquires are degraded, with their
// cause, and open the breaker.
func TestConcurrencyObserver(t *testing.T) {
	t.Parallel()
	var o leaseObserver
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "seen", Max: 1, Observer: &o})
	acquire(t, c, "k", true)
	acquire(t, c, "k", false)
	if len(o.events) != 2 || !o.events[0].Allowed || o.events[1].Allowed || o.events[0].Policy != "seen" {
		t.Fatalf("memory store: events %+v; want allowed then refused, policy seen", o.events)
	}

	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	m.Close()
	var down leaseObserver
	c = mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "down", Max: 1, Observer: &down, Timeout: 200 * time.Millisecond})
	for range core.DefaultBreakerFailures + 1 {
		if _, res, _ := c.Acquire(context.Background(), "k"); !res.Degraded {
			t.Fatalf("store down: %+v, want degraded", res)
		}
	}
	down.mu.Lock()
	defer down.mu.Unlock()
	for i, e := range down.events {
		if !e.Degraded || e.Allowed || e.Err == nil {
			t.Errorf("event %d: %+v; want a degraded refusal with its cause", i, e)
		}
	}
	if !errors.Is(down.events[len(down.events)-1].Err, core.ErrCircuitOpen) || len(down.breakers) == 0 || !down.breakers[0] {
		t.Errorf("breaker changes %v, last cause %v; want the breaker open", down.breakers, down.events[len(down.events)-1].Err)
	}
}

// TestConcurrencyKeepAliveRacingRelease: a KeepAlive racing its lease's
// Release never leaves the lease in the renewal set.
func TestConcurrencyKeepAliveRacingRelease(t *testing.T) {
	t.Parallel()
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "race", Max: 1000})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 500 {
		l, _ := acquire(t, c, "k", true)
		wg.Go(l.KeepAlive)
		wg.Go(func() { _ = l.Release(ctx) })
	}
	wg.Wait()
	if got := core.Kept(c); got != 0 {
		t.Fatalf("%d released leases still kept for renewal", got)
	}
}
