package core_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

type breakerCounter struct {
	core.Observer
	opened atomic.Int64
}

func (b *breakerCounter) Decision(core.DecisionEvent) {}
func (b *breakerCounter) BreakerChange(_ string, open bool) {
	if open {
		b.opened.Add(1)
	}
}

// TestFloodAtLatency (issue 21): Redis 30 ms away; 64 goroutines flood
// one key while a victim makes a request every 25 ms on another. While
// Redis answers within Timeout, every decision is Redis's, exactly: the
// breaker never opens, no decision is degraded (the victim's nor the
// attacker's, under FailOpen too), the victim is always allowed, and the
// attacker is admitted at most C + R·Δ. Timeout is a generous 5 s, so a
// loaded -race run cannot degrade a decision: what a flood costs the
// victim's latency is bench -only flood's to show (BENCHMARKS.md). Before
// issue 21's fix, the breaker opened 7–15 times and FailOpen admitted the
// attacker 36 373–59 004 times against a bound of 136.
func TestFloodAtLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1.5 s flood through a latency proxy")
	}
	for _, clientMode := range []string{"default-client", "context-timeouts"} {
		for _, mode := range []core.FailMode{core.FailClosed, core.FailOpen} {
			t.Run(clientMode+"/"+mode.String(), func(t *testing.T) {
				p := faultproxy.Start(t, redistest.Addr(t))
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: clientMode == "context-timeouts"})
				defer c.Close()
				store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
				if err := store.Preload(context.Background()); err != nil {
					t.Fatal(err)
				}
				limit := core.PerSecond(50)
				obs := &breakerCounter{}
				l := limitertest.New(t, core.Config{Store: store, Limit: limit, FailMode: mode, Observer: obs, Timeout: 5 * time.Second})
				f := flood(t, l, p)
				a := f.attacker
				bound := limitertest.Bound(limit, a.Elapsed) + 1
				t.Logf("flood at +30ms: victim %d of %d degraded, %d denied; breaker opened %d times; attacker admitted %d (bound %d), %d of its %d decisions degraded",
					f.degraded, f.sent, f.denied, obs.opened.Load(), a.Admitted, bound, a.Degraded, a.Decisions())
				if obs.opened.Load() != 0 || f.degraded != 0 || f.denied != 0 || a.Degraded != 0 || a.Admitted > bound {
					t.Errorf("breaker opened %d times; victim %d of %d degraded, %d denied; attacker admitted %d of a bound of %d, %d of %d degraded; want 0, 0, 0, at most the bound, 0",
						obs.opened.Load(), f.degraded, f.sent, f.denied, a.Admitted, bound, a.Degraded, a.Decisions())
				}
			})
		}
	}
}

// floodStats is what one flood measured.
type floodStats struct {
	sent, degraded, denied int // the victim's requests
	attacker               limitertest.Counts
}

// flood runs 64 goroutines on one key of l for 1.5 s, p 30 ms away, while a
// victim makes a request every 25 ms on another.
func flood(t *testing.T, l *core.Limiter, p *faultproxy.Proxy) floodStats {
	ctx := context.Background()
	// An app that has been running has connections open: a new one costs
	// a round trip more (go-redis's HELLO).
	p.SetLatency(0)
	var warm sync.WaitGroup
	for i := range 16 {
		warm.Go(func() { l.Allow(ctx, "warm-"+strconv.Itoa(i)) })
	}
	warm.Wait()
	p.SetLatency(30 * time.Millisecond)
	const window = 1500 * time.Millisecond
	var f floodStats
	victim := make(chan struct{})
	go func() {
		defer close(victim)
		for start := time.Now(); time.Since(start) < window; time.Sleep(25 * time.Millisecond) {
			res, _ := l.Allow(ctx, "victim")
			f.sent++
			if res.Degraded {
				f.degraded++
			} else if !res.Allowed {
				f.denied++
			}
		}
	}()
	// A pause between decisions: a spinning loop would starve the netpoller.
	f.attacker = limitertest.Flood{Key: "attacker", Goroutines: 64, For: window, Pause: 100 * time.Microsecond}.Run(t, l)
	<-victim
	return f
}
