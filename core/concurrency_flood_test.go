package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestConcurrencyOwnFloodDecidedExactly (issue 36, item 2; DESIGN §2a):
// Redis 10 ms away, 64 goroutines flood one key of a FailOpen
// Concurrency (Max 2) with acquires while a victim acquires another key
// of a FailClosed one on the same store. While Redis answers, the flood
// is decided by the store, never by FailMode: no acquire of the attacker
// is degraded, so never more than Max of its requests run at once, and
// the victim is never refused by degradation. The acquires of one key
// leave in one call at a time, carrying every acquire that arrived while
// the previous was in flight, so the flood holds one of the store's
// MaxInFlight calls, not one per acquire. Timeout is generous: the
// property is what decides, not how fast. Before (main 61da288): one
// call per acquire, past MaxInFlight the rest ErrOverloaded, FailOpen
// admitted them and the victim's acquires were refused with them.
func TestConcurrencyOwnFloodDecidedExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood through a latency proxy")
	}
	p := faultproxy.Start(t, redistest.Addr(t))
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	if err := store.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	const max, attackers, rounds, bound = 2, 64, 20, 16
	var storeErrs sync.Map // first error per Concurrency name
	observe := func(name string) core.Observer {
		return onStoreError(func(err error) { storeErrs.LoadOrStore(name, err) })
	}
	for _, rate := range []bool{false, true} {
		name := "plain"
		if rate {
			name = "rate"
		}
		t.Run(name, func(t *testing.T) {
			cfg := core.ConcurrencyConfig{Store: store, Name: "flood-" + name, Max: max, FailMode: core.FailOpen,
				Timeout: 5 * time.Second, MaxInFlight: bound, Observer: observe("attacker")}
			if rate {
				l, err := core.New(core.Config{Store: store, Limit: core.PerHour(1 << 20), Name: "flood-rate-tokens",
					FailMode: core.FailOpen, Timeout: 5 * time.Second, DenyCacheSize: -1})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Rate = l
			}
			attacker := mustConcurrency(t, cfg)
			victim := mustConcurrency(t, core.ConcurrencyConfig{Store: store, Name: "flood-victim-" + name, Max: max,
				FailMode: core.FailClosed, Timeout: 5 * time.Second, MaxInFlight: bound, Observer: observe("victim")})
			ctx := context.Background()
			// Scripts loaded and connections open before the delay.
			for _, cc := range []*core.Concurrency{attacker, victim} {
				l, _ := acquire(t, cc, "warm-up", true)
				_ = l.Release(ctx)
			}
			p.SetLatency(10 * time.Millisecond)
			defer p.SetLatency(0)

			var g gauge
			var degraded atomic.Int64
			var wg sync.WaitGroup
			for range attackers {
				wg.Go(func() {
					for range rounds {
						l, res, err := attacker.Acquire(ctx, "attacker")
						if err != nil {
							t.Error(err)
							return
						}
						if res.Degraded {
							degraded.Add(1)
						}
						if !res.Allowed {
							continue
						}
						g.hold()
						_ = l.Release(ctx)
					}
				})
			}
			var victimRefused, victimDegraded int
			const victimRounds = 20
			for range victimRounds {
				l, res, err := victim.Acquire(ctx, "victim")
				if err != nil {
					t.Fatal(err)
				}
				if res.Degraded {
					victimDegraded++
				}
				if !res.Allowed {
					victimRefused++
					continue
				}
				time.Sleep(5 * time.Millisecond)
				_ = l.Release(ctx)
			}
			wg.Wait()
			t.Logf("own in-flight flood at +10ms (%s): attacker %d admitted of %d acquires, at most %d at once (Max %d), %d degraded; victim %d of %d refused, %d degraded",
				name, g.admitted.Load(), attackers*rounds, g.peak.Load(), max, degraded.Load(), victimRefused, victimRounds, victimDegraded)
			if n := g.peak.Load(); n > max {
				t.Errorf("attacker: %d requests ran at once, Max %d", n, max)
			}
			if n := degraded.Load(); n > 0 {
				t.Errorf("attacker: %d of %d acquires degraded", n, attackers*rounds)
			}
			if victimRefused > 0 || victimDegraded > 0 {
				t.Errorf("victim: %d of %d acquires refused, %d degraded; its key is free", victimRefused, victimRounds, victimDegraded)
			}
			if g.admitted.Load() == 0 {
				t.Error("attacker: nothing admitted")
			}
			storeErrs.Range(func(k, v any) bool {
				t.Errorf("%s: store error %v (overloaded: %v)", k, v, errors.Is(v.(error), core.ErrOverloaded))
				return true
			})
			storeErrs.Clear()
		})
	}
}
