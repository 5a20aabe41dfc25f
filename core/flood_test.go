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
				f := flood(l, p)
				bound := int64(limit.Capacity()) + int64(f.elapsed.Seconds()*float64(limit.Rate)) + 1
				t.Logf("flood at +30ms: victim %d of %d degraded, %d denied; breaker opened %d times; attacker admitted %d (bound %d), %d of its %d decisions degraded",
					f.degraded, f.sent, f.denied, obs.opened.Load(), f.admitted, bound, f.lost, f.decisions)
				if obs.opened.Load() != 0 || f.degraded != 0 || f.denied != 0 || f.lost != 0 || f.admitted > bound {
					t.Errorf("breaker opened %d times; victim %d of %d degraded, %d denied; attacker admitted %d of a bound of %d, %d of %d degraded; want 0, 0, 0, at most the bound, 0",
						obs.opened.Load(), f.degraded, f.sent, f.denied, f.admitted, bound, f.lost, f.decisions)
				}
			})
		}
	}
}

// floodStats is what one flood measured.
type floodStats struct {
	sent, degraded, denied    int   // the victim's requests
	admitted, decisions, lost int64 // the attacker's
	elapsed                   time.Duration
}

// flood runs 64 goroutines on one key of l for 1.5 s, p 30 ms away, while a
// victim makes a request every 25 ms on another.
func flood(l *core.Limiter, p *faultproxy.Proxy) floodStats {
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
	start := time.Now()
	var admitted, decisions, lost atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for time.Since(start) < window {
				res, _ := l.Allow(ctx, "attacker")
				if res.Allowed {
					admitted.Add(1)
				}
				if decisions.Add(1); res.Degraded {
					lost.Add(1)
				}
				time.Sleep(100 * time.Microsecond) // a spinning loop would starve the netpoller
			}
		})
	}
	var f floodStats
	for time.Since(start) < window {
		res, _ := l.Allow(ctx, "victim")
		f.sent++
		if res.Degraded {
			f.degraded++
		} else if !res.Allowed {
			f.denied++
		}
		time.Sleep(25 * time.Millisecond)
	}
	wg.Wait()
	f.elapsed = time.Since(start)
	f.admitted, f.decisions, f.lost = admitted.Load(), decisions.Load(), lost.Load()
	return f
}
