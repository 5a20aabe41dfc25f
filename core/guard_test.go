package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// guardKinds are the two kinds of limiter, each deciding through a fresh
// limiter on store: a rate limit and an in-flight limit, configured by
// the same fields.
var guardKinds = map[string]func(t *testing.T, store core.Store, mode core.FailMode, timeout time.Duration, o core.Observer, logger *slog.Logger) func() core.Result{
	"rate": func(t *testing.T, store core.Store, mode core.FailMode, timeout time.Duration, o core.Observer, logger *slog.Logger) func() core.Result {
		l, err := core.New(core.Config{Store: store, Name: "guarded", Limit: core.PerSecond(1000), FailMode: mode, Instances: 1,
			Timeout: timeout, Observer: o, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return func() core.Result {
			r, _ := l.Allow(context.Background(), "k")
			return r
		}
	},
	"in-flight": func(t *testing.T, store core.Store, mode core.FailMode, timeout time.Duration, o core.Observer, logger *slog.Logger) func() core.Result {
		c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "guarded", Max: 1000, FailMode: mode, Instances: 1,
			Timeout: timeout, Lease: time.Minute, Observer: o, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return func() core.Result {
			_, r, _ := c.Acquire(context.Background(), "k")
			return r
		}
	},
}

// stalledServer returns the address of a server that accepts connections
// and never answers.
func stalledServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestGuardStalledRedisOpensBreaker: a Redis that accepts and never
// answers opens the breaker of an in-flight limiter as it does a rate
// limiter's: once the first calls sent under the store's own longer
// deadline fail, the next decisions that time out count, and
// BreakerFailures of them open it. Counted in decisions, not time.
func TestGuardStalledRedisOpensBreaker(t *testing.T) {
	for kind, mk := range guardKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client := redis.NewClient(&redis.Options{Addr: stalledServer(t), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { client.Close() })
			var o leaseObserver
			decide := mk(t, core.NewRedisStore(client), core.FailClosed, 100*time.Millisecond, &o, slog.New(slog.DiscardHandler))
			// Each decision waits Timeout (100 ms); the calls of the first
			// fail after the store's own least deadline (1 s): 40
			// decisions are 4 s.
			const most = 40
			opened := 0
			for i := 0; i < most; i++ {
				if r := decide(); !r.Degraded || r.Allowed {
					t.Fatalf("decision %d on a stalled Redis: %+v; want a degraded refusal", i, r)
				}
				o.mu.Lock()
				opened = len(o.breakers)
				o.mu.Unlock()
				if opened > 0 {
					break
				}
			}
			o.mu.Lock()
			changes := append([]bool(nil), o.breakers...)
			o.mu.Unlock()
			if opened == 0 || !changes[0] {
				t.Fatalf("%s limiter: breaker changes %v after %d decisions on a stalled Redis; want it open", kind, changes, most)
			}
			// Open: the next decision is refused without a store call.
			r := decide()
			o.mu.Lock()
			defer o.mu.Unlock()
			if last := o.events[len(o.events)-1]; !r.Degraded || !errors.Is(last.Err, core.ErrCircuitOpen) {
				t.Fatalf("%s limiter: after the breaker opened: %+v, cause %v; want ErrCircuitOpen", kind, r, last.Err)
			}
		})
	}
}

// storeErrorKind is the label metrics.Collector counts a degraded
// decision's cause under.
func storeErrorKind(err error) string {
	switch {
	case errors.Is(err, core.ErrTimeout):
		return "timeout"
	case errors.Is(err, core.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, core.ErrOverloaded):
		return "overloaded"
	}
	return "other"
}

// TestGuardOutageReportedAlike: one Redis outage under FailOpen is
// reported the same under an in-flight limiter as under a rate limiter:
// the same Observer events (degraded, with causes of the same metrics
// kind), and the same throttled log lines naming the policy: decisions
// degraded, the breaker opened.
func TestGuardOutageReportedAlike(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close()
	type report struct {
		kinds []string
		log   string
	}
	got := map[string]report{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for kind, mk := range guardKinds {
		wg.Go(func() {
			client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer client.Close()
			var buf bytes.Buffer
			var bmu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &bmu}, nil))
			var o leaseObserver
			decide := mk(t, core.NewRedisStore(client), core.FailOpen, 2*time.Second, &o, logger)
			for i := range core.DefaultBreakerFailures + 2 {
				if r := decide(); !r.Allowed || !r.Degraded {
					t.Errorf("%s: decision %d with Redis down: %+v; want a degraded admission", kind, i, r)
				}
			}
			var rep report
			o.mu.Lock()
			for _, e := range o.events {
				if !e.Degraded || e.Policy != "guarded" {
					t.Errorf("%s: event %+v; want degraded, policy guarded", kind, e)
				}
				rep.kinds = append(rep.kinds, storeErrorKind(e.Err))
			}
			o.mu.Unlock()
			bmu.Lock()
			rep.log = regexp.MustCompile(`time=\S+ |127\.0\.0\.1:\d+`).ReplaceAllString(buf.String(), "")
			bmu.Unlock()
			mu.Lock()
			got[kind] = rep
			mu.Unlock()
		})
	}
	wg.Wait()
	rate, inflight := got["rate"], got["in-flight"]
	t.Logf("rate limiter: causes %v, log:\n%s", rate.kinds, rate.log)
	t.Logf("in-flight limiter: causes %v, log:\n%s", inflight.kinds, inflight.log)
	if strings.Join(rate.kinds, ",") != strings.Join(inflight.kinds, ",") {
		t.Errorf("metrics kinds differ: rate %v, in-flight %v", rate.kinds, inflight.kinds)
	}
	degraded, opened := strings.Count(inflight.log, "decisions degraded"), strings.Count(inflight.log, "circuit breaker open")
	if n := strings.Count(inflight.log, "level=WARN"); n != 2 || degraded != 1 || opened != 1 || !strings.Contains(inflight.log, "policy=guarded") {
		t.Errorf("in-flight limiter logged %d warnings, want 2 naming the policy (decisions degraded, the breaker opened):\n%s", n, inflight.log)
	}
	if rate.log != inflight.log {
		t.Errorf("log lines differ:\nrate:      %s\nin-flight: %s", rate.log, inflight.log)
	}
}

// onStoreError is an Observer passing each degraded decision's cause to
// the function: what a test reads of store failures.
type onStoreError func(error)

func (f onStoreError) Decision(e core.DecisionEvent) {
	if e.Err != nil {
		f(e.Err)
	}
}

func (onStoreError) BreakerChange(string, bool) {}
