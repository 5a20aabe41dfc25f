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
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// decision is one Allow as the sentinel test saw it.
type decision struct {
	start    time.Time // when Allow was called
	at       time.Time // when it returned
	degraded bool
	allowed  bool
	retry    time.Duration
}

// sentinelTraffic is a stream of decisions from several goroutines through
// one limiter, recorded for the checks after the failover.
type sentinelTraffic struct {
	mode core.FailMode
	lim  *core.Limiter

	timeouts, open, other atomic.Int64 // degraded decisions by cause

	mu  sync.Mutex
	log []decision
}

func (tr *sentinelTraffic) run(stop <-chan struct{}, g int, errs chan<- error) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		res, err := tr.lim.Allow(context.Background(), "user-"+strconv.Itoa(g*1000+i%50))
		if err != nil {
			errs <- err
			return
		}
		tr.mu.Lock()
		tr.log = append(tr.log, decision{start, time.Now(), res.Degraded, res.Allowed, res.RetryAfter})
		tr.mu.Unlock()
		time.Sleep(time.Millisecond) // pace: a few thousand decisions a second is plenty
	}
}

// since returns the decisions made after t0 (a copy).
func (tr *sentinelTraffic) onError(err error) {
	switch {
	case errors.Is(err, core.ErrTimeout):
		tr.timeouts.Add(1)
	case errors.Is(err, core.ErrCircuitOpen):
		tr.open.Add(1)
	default:
		tr.other.Add(1)
	}
}

func (tr *sentinelTraffic) since(t0 time.Time) []decision {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []decision
	for _, d := range tr.log {
		if !d.at.Before(t0) {
			out = append(out, d)
		}
	}
	return out
}

// recovered reports whether, after t0, the limiter has decided for at
// least d without a single degraded decision, and when it last degraded.
func (tr *sentinelTraffic) recovered(t0 time.Time, d time.Duration) (ok bool, lastDegraded time.Time) {
	ds := tr.since(t0)
	healthySince := t0
	for _, x := range ds {
		if x.degraded {
			lastDegraded = x.at
			healthySince = x.at
		}
	}
	return len(ds) > 0 && ds[len(ds)-1].at.Sub(healthySince) >= d, lastDegraded
}

// TestSentinelFailover kills the primary of a Sentinel setup while
// limiters (FailOpen and FailClosed, each with its own failover client, as
// two app instances) decide from several goroutines. Decisions are
// degraded only while no primary answers, follow the FailMode then, and
// come back by themselves on the promoted replica, whose empty script cache
// is met with NOSCRIPT → EVAL; nothing panics and no goroutine is left.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	goroutines := runtime.NumGoroutine()
	// Registered first, so it runs last: after the clients are closed and
	// the servers killed. The limiter's idle store workers leave after 2s.
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for runtime.NumGoroutine() > goroutines+5 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines+5 {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutines: %d before, %d after closing everything\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
		}
	})

	s := redistest.StartSentinel(t)
	prefix := redistest.Prefix(t)
	var traffic []*sentinelTraffic
	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed} {
		tr := &sentinelTraffic{mode: mode}
		tr.lim = topoLimiter(t, core.Config{
			Store: core.NewRedisStore(s.FailoverClient(), core.WithPrefix(prefix)),
			// Never denies while Redis decides: every denial is a degraded one.
			Limit:    core.PerSecond(1_000_000),
			Name:     "sentinel-" + mode.String(),
			FailMode: mode,
			// Generous for a loaded CI machine: a slow decision must not
			// count as an outage.
			Timeout:  time.Second,
			Observer: onStoreError(tr.onError),
		})
		traffic = append(traffic, tr)
	}
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for _, tr := range traffic {
		for g := range 3 {
			wg.Go(func() { tr.run(stop, g, errs) })
		}
	}
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopTraffic()

	begin := time.Now()
	waitFor(t, 20*time.Second, "traffic before the failover", func() bool {
		for _, tr := range traffic {
			if len(tr.since(begin)) < 200 {
				return false
			}
		}
		return true
	})

	killed := time.Now()
	old := s.KillPrimary()
	primary := s.WaitFailover(old)
	promoted := time.Now()
	t.Logf("primary %s killed; sentinels promoted %s after %v", old, primary, promoted.Sub(killed).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "decisions healthy for 1s after the failover", func() bool {
		for _, tr := range traffic {
			if ok, _ := tr.recovered(promoted, time.Second); !ok {
				return false
			}
		}
		return true
	})
	stopTraffic()
	select {
	case err := <-errs:
		t.Fatalf("Allow returned an error: %v", err)
	default:
	}

	for _, tr := range traffic {
		all := tr.since(begin)
		var first, last time.Time
		var degraded, before int
		var slowest time.Duration
		for _, d := range all {
			switch {
			case tr.mode == core.FailOpen && !d.allowed:
				t.Fatalf("%v: denied at %v (degraded %v); FailOpen never denies here", tr.mode, d.at.Sub(killed), d.degraded)
			case tr.mode == core.FailClosed && d.allowed == d.degraded:
				t.Fatalf("%v: allowed=%v degraded=%v at %v; FailClosed denies exactly the degraded decisions", tr.mode, d.allowed, d.degraded, d.at.Sub(killed))
			case tr.mode == core.FailClosed && d.degraded && d.retry <= 0:
				t.Fatalf("%v: degraded denial without Retry-After", tr.mode)
			}
			if !d.degraded {
				continue
			}
			if d.at.Before(killed) {
				before++
				continue
			}
			degraded++
			if first.IsZero() || d.start.Before(first) {
				first = d.start
			}
			last = d.at
			slowest = max(slowest, d.at.Sub(d.start))
		}
		if before > 0 {
			t.Errorf("%v: %d degraded decisions before the primary was killed", tr.mode, before)
		}
		if degraded == 0 {
			t.Errorf("%v: no degraded decision at all: did the outage happen?", tr.mode)
			continue
		}
		// The window runs from the call of the first degraded decision to
		// the return of the last: what a client saw of the outage.
		t.Logf("%v: %d decisions, %d degraded (%d timed out, %d circuit open, %d store errors; slowest %v); "+
			"degraded window %v, from %v to %v after the kill (sentinels agreed on the new primary at %v)",
			tr.mode, len(all), degraded, tr.timeouts.Load(), tr.open.Load(), tr.other.Load(), slowest.Round(time.Millisecond),
			last.Sub(first).Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond),
			last.Sub(killed).Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond))
		if w := last.Sub(killed); w > 20*time.Second {
			t.Errorf("%v: still degraded %v after the kill", tr.mode, w)
		}
	}

	// The promoted replica never saw the script (scripts replicate as their
	// effects): it must have answered NOSCRIPT, and EVAL must have followed.
	newPrimary := redis.NewClient(&redis.Options{Addr: primary})
	defer newPrimary.Close()
	ctx := context.Background()
	if n := errorStat(ctx, newPrimary, "NOSCRIPT"); n == 0 {
		t.Errorf("promoted primary %s replied NOSCRIPT %d times; want its empty script cache to have been met", primary, n)
	}
	if stats, _ := newPrimary.Info(ctx, "commandstats").Result(); !strings.Contains(stats, "cmdstat_eval:") {
		t.Errorf("promoted primary %s never ran EVAL", primary)
	}

	// After the failover each decision counts exactly once again.
	count := topoLimiter(t, core.Config{
		Store: core.NewRedisStore(s.FailoverClient(), core.WithPrefix(prefix)),
		Limit: core.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 100}, FailMode: core.FailClosed, Timeout: time.Second,
	})
	for i := 1; i <= 5; i++ {
		res, err := count.Allow(ctx, "after-failover")
		if err != nil || res.Degraded || res.Remaining != 100-i {
			t.Fatalf("decision %d after the failover: %+v, %v; want %d left", i, res, err, 100-i)
		}
	}
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
