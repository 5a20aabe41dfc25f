package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestOneDeadlineBehindStalledProbe (issue 18, item 1): a hot subject's
// cached denial runs out while Redis stalls, so one caller probes the store
// and many concurrent callers wait on that probe. Each decision has one
// deadline from its start, whatever it waits on: no decision takes longer
// than Timeout (plus scheduling slack), where a caller used to wait up to
// Timeout for the probe and then make a store call with a Timeout of its
// own (200–202 ms at Timeout 100 ms).
func TestOneDeadlineBehindStalledProbe(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	p := faultproxy.Start(t, srv.Addr())
	// go-redis defaults: a stalled call holds its connection for the 3 s
	// read timeout, far past the decision's deadline.
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	const (
		// Waiting on the stalled probe and then calling the store, each
		// by a deadline of its own, is 2 × Timeout; one deadline is
		// Timeout plus the scheduler's delay, which on a loaded 2-CPU
		// machine under -race reached past 50 ms (issue 44): Timeout
		// large enough to tell them apart with a wide slack.
		timeout = 300 * time.Millisecond
		callers = 32
		cycles  = 3
		slack   = timeout * 3 / 4
	)
	// One token every 200 ms: a denial is cached for at most 200 ms, then a
	// probe asks Redis.
	limit := core.Limit{Rate: 5, Period: time.Second, Burst: 1}
	l := limitertest.New(t, core.Config{
		Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))),
		Limit: limit, FailMode: core.FailOpen, Timeout: timeout,
	})
	ctx := context.Background()
	var worst time.Duration
	var decisions, degraded, held int
	for cycle := range cycles {
		p.SetMode(faultproxy.Forward)
		faultHealthyOne(t, l) // the breaker is closed again
		waitFor(t, 5*time.Second, "a denial of the hot subject by Redis", func() bool {
			res, err := l.Allow(ctx, "hot")
			return err == nil && !res.Allowed && !res.Degraded
		})
		p.SetMode(faultproxy.Stall)
		// Cached denials first; once the cached deadline passes, one caller
		// probes the stalled store and the others wait on it.
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range callers {
			wg.Go(func() {
				for time.Since(start) < limit.Period/time.Duration(limit.Rate)+3*timeout {
					t0 := time.Now()
					res, err := l.Allow(ctx, "hot")
					lat := time.Since(t0)
					if err != nil {
						t.Errorf("Allow: %v", err)
						return
					}
					mu.Lock()
					decisions++
					if res.Degraded {
						degraded++
					}
					if lat >= timeout/2 {
						held++
					}
					worst = max(worst, lat)
					mu.Unlock()
					// Callers that spin would measure the Go scheduler of a
					// 2-CPU machine, not the deadline.
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		t.Logf("cycle %d: slowest decision so far %v", cycle, worst.Round(100*time.Microsecond))
	}
	p.SetMode(faultproxy.Forward)
	t.Logf("fault matrix: %-22s %d callers × %d stalls: %d decisions, %d degraded, %d held ≥ Timeout/2; slowest %v (Timeout %v)",
		"denial-cache probe stalled", callers, cycles, decisions, degraded, held, worst.Round(100*time.Microsecond), timeout)
	if held < callers {
		t.Errorf("only %d decisions waited ≥ %v: the stalled probe never held its waiters", held, timeout/2)
	}
	if worst > timeout+slack {
		t.Errorf("slowest decision %v; want ≤ Timeout %v + %v (one deadline per decision)", worst, timeout, slack)
	}
}
