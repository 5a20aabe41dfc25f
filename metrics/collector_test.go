package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/metrics"
	"github.com/sluicehq/ratelimit/nethttp"
)

func TestDecisionOutcomes(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	events := []core.DecisionEvent{
		{Policy: "api", Allowed: true, Latency: 300 * time.Microsecond},
		{Policy: "api", Allowed: true, Latency: 2 * time.Millisecond},
		{Policy: "api", Latency: time.Millisecond},
		{Policy: "api", Cached: true},
		{Policy: "api", Allowed: true, Degraded: true, Latency: 50 * time.Millisecond, Err: fmt.Errorf("wrapped: %w", core.ErrTimeout)},
		{Policy: "api", Degraded: true, Err: core.ErrCircuitOpen},
		{Policy: "api", Allowed: true, Degraded: true, Err: core.ErrOverloaded},
		{Policy: "api", Allowed: true, Degraded: true, Latency: time.Millisecond, Err: errors.New("dial tcp: connection refused")},
		{Policy: "login", Allowed: true},
	}
	for _, e := range events {
		c.Decision(e)
	}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"allowed", value(t, c, "decisions_total", "api", "allowed"), 2},
		{"denied, cached included", value(t, c, "decisions_total", "api", "denied"), 2},
		{"degraded_allowed", value(t, c, "decisions_total", "api", "degraded_allowed"), 3},
		{"degraded_denied", value(t, c, "decisions_total", "api", "degraded_denied"), 1},
		{"other policy", value(t, c, "decisions_total", "login", "allowed"), 1},
		{"cache hits", value(t, c, "denial_cache_hits_total", "api"), 1},
		{"timeout", value(t, c, "store_errors_total", "api", "timeout"), 1},
		{"circuit_open", value(t, c, "store_errors_total", "api", "circuit_open"), 1},
		{"overloaded", value(t, c, "store_errors_total", "api", "overloaded"), 1},
		{"other", value(t, c, "store_errors_total", "api", "other"), 1},
		{"no errors elsewhere", value(t, c, "store_errors_total", "login", "other"), 0},
	}
	for _, tt := range tests {
		if got := tt.got; got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// value returns the value of c's series name{policy, outcome or kind}, or
// -1 when there is none.
func value(t *testing.T, c *metrics.Collector, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ratelimit_"+name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			// Label pairs come sorted by name; policy sorts after kind and outcome.
			lps := m.GetLabel()
			if len(lps) != len(labels) {
				continue
			}
			for _, lp := range lps {
				want := labels[0]
				if lp.GetName() != "policy" {
					want = labels[1]
				}
				if lp.GetValue() != want {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func TestLatencyHistogram(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true, Latency: 400 * time.Microsecond})
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true, Latency: 30 * time.Millisecond})
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true}) // memory store: not asked
	want := `
# HELP ratelimit_store_latency_seconds Time spent waiting for the store, per decision that asked it.
# TYPE ratelimit_store_latency_seconds histogram
ratelimit_store_latency_seconds_bucket{policy="p",le="0.0001"} 0
ratelimit_store_latency_seconds_bucket{policy="p",le="0.00025"} 0
ratelimit_store_latency_seconds_bucket{policy="p",le="0.0005"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.001"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.0025"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.005"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.01"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.025"} 1
ratelimit_store_latency_seconds_bucket{policy="p",le="0.05"} 2
ratelimit_store_latency_seconds_bucket{policy="p",le="0.1"} 2
ratelimit_store_latency_seconds_bucket{policy="p",le="+Inf"} 2
ratelimit_store_latency_seconds_sum{policy="p"} 0.0304
ratelimit_store_latency_seconds_count{policy="p"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_store_latency_seconds"); err != nil {
		t.Error(err)
	}
}

func TestBreakerGauge(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true})
	const head = `
# HELP ratelimit_breaker_open 1 while the policy's circuit breaker keeps the store uncalled, else 0.
# TYPE ratelimit_breaker_open gauge
`
	steps := []struct {
		change func()
		want   string
	}{
		{func() {}, `ratelimit_breaker_open{policy="p"} 0`},
		{func() { c.BreakerChange("p", true) }, `ratelimit_breaker_open{policy="p"} 1`},
		{func() { c.BreakerChange("q", true) }, `ratelimit_breaker_open{policy="p"} 1` + "\n" + `ratelimit_breaker_open{policy="q"} 1`},
		{func() { c.BreakerChange("p", false) }, `ratelimit_breaker_open{policy="p"} 0` + "\n" + `ratelimit_breaker_open{policy="q"} 1`},
	}
	for i, s := range steps {
		s.change()
		if err := testutil.CollectAndCompare(c, strings.NewReader(head+s.want+"\n"), "ratelimit_breaker_open"); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
}

func TestSeriesAppearAtZero(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d series before any decision, want 0", n)
	}
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true})
	// 6 outcomes, 1 cache hits, 1 histogram, 4 error kinds, 1 gauge.
	if got, want := testutil.CollectAndCount(c), 13; got != want {
		t.Errorf("%d series after the first decision, want %d", got, want)
	}
}

// TestWithLimiter runs limiters on a MemoryStore and on a store that always
// fails through one Collector.
func TestWithLimiter(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(2), FailMode: core.FailOpen, Name: "mem", Observer: c})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		lim.Allow(context.Background(), "k")
	}
	failing, err := core.New(core.Config{Store: limitertest.NewDownStore(), Limit: core.PerHour(2), FailMode: core.FailClosed, Name: "down",
		Observer: c, BreakerFailures: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		failing.Allow(context.Background(), "k")
	}
	want := `
# HELP ratelimit_decisions_total Rate-limit decisions by policy and outcome (allowed, denied, degraded_allowed, degraded_denied; in dry-run mode would_deny, degraded_would_deny).
# TYPE ratelimit_decisions_total counter
ratelimit_decisions_total{outcome="allowed",policy="down"} 0
ratelimit_decisions_total{outcome="allowed",policy="mem"} 2
ratelimit_decisions_total{outcome="degraded_allowed",policy="down"} 0
ratelimit_decisions_total{outcome="degraded_allowed",policy="mem"} 0
ratelimit_decisions_total{outcome="degraded_denied",policy="down"} 4
ratelimit_decisions_total{outcome="degraded_denied",policy="mem"} 0
ratelimit_decisions_total{outcome="degraded_would_deny",policy="down"} 0
ratelimit_decisions_total{outcome="degraded_would_deny",policy="mem"} 0
ratelimit_decisions_total{outcome="denied",policy="down"} 0
ratelimit_decisions_total{outcome="denied",policy="mem"} 3
ratelimit_decisions_total{outcome="would_deny",policy="down"} 0
ratelimit_decisions_total{outcome="would_deny",policy="mem"} 0
# HELP ratelimit_store_errors_total Degraded decisions by policy and reason (timeout, circuit_open, overloaded, other).
# TYPE ratelimit_store_errors_total counter
ratelimit_store_errors_total{kind="circuit_open",policy="down"} 2
ratelimit_store_errors_total{kind="circuit_open",policy="mem"} 0
ratelimit_store_errors_total{kind="other",policy="down"} 2
ratelimit_store_errors_total{kind="other",policy="mem"} 0
ratelimit_store_errors_total{kind="overloaded",policy="down"} 0
ratelimit_store_errors_total{kind="overloaded",policy="mem"} 0
ratelimit_store_errors_total{kind="timeout",policy="down"} 0
ratelimit_store_errors_total{kind="timeout",policy="mem"} 0
# HELP ratelimit_breaker_open 1 while the policy's circuit breaker keeps the store uncalled, else 0.
# TYPE ratelimit_breaker_open gauge
ratelimit_breaker_open{policy="down"} 1
ratelimit_breaker_open{policy="mem"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ratelimit_decisions_total", "ratelimit_store_errors_total", "ratelimit_breaker_open"); err != nil {
		t.Error(err)
	}
}

// TestDryRunRefusalIsWouldDeny (issue 23, item 4): a refusal decided in
// dry-run mode let its request through, so it is would_deny (or
// degraded_would_deny), never denied: "share refused" stays true.
func TestDryRunRefusalIsWouldDeny(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: "dry", Observer: c})
	if err != nil {
		t.Fatal(err)
	}
	dry := core.WithDryRun(context.Background())
	for range 3 {
		lim.Allow(dry, "k")
	}
	c.Decision(core.DecisionEvent{Policy: "dry", Degraded: true, DryRun: true, Err: core.ErrCircuitOpen})
	for _, tt := range []struct {
		outcome string
		want    float64
	}{{"allowed", 1}, {"would_deny", 2}, {"degraded_would_deny", 1}, {"denied", 0}, {"degraded_denied", 0}} {
		if got := value(t, c, "decisions_total", "dry", tt.outcome); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.outcome, got, tt.want)
		}
	}
}

// TestPeekAndRefundAreNotDecisions (issue 23, item 4): 3 takes, 10 peeks
// and 5 refunds are 3 decisions, through a remote store as on memory.
func TestPeekAndRefundAreNotDecisions(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]core.Store{"memory": core.NewMemoryStore(), "remote": fakestore.Over(core.NewMemoryStore(), nil)} {
		c := metrics.New()
		lim, err := core.New(core.Config{Store: store, Limit: core.PerHour(2), FailMode: core.FailOpen, Name: "p", Observer: c})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range 3 {
			lim.Allow(ctx, "k")
		}
		for range 10 {
			lim.Peek(ctx, "k", 1)
		}
		for range 5 {
			lim.Refund(ctx, "k", 1)
		}
		total := 0.0
		for _, o := range []string{"allowed", "denied", "degraded_allowed", "degraded_denied"} {
			total += value(t, c, "decisions_total", "p", o)
		}
		if total != 3 {
			t.Errorf("%s: decisions_total %v after 3 takes, 10 peeks and 5 refunds; want 3", name, total)
		}
	}
}

func TestHTTPObservers(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	dry, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: "trial"})
	if err != nil {
		t.Fatal(err)
	}
	down, err := core.New(core.Config{Store: limitertest.NewDownStore(), Limit: core.PerHour(1), FailMode: core.FailClosed, Name: "closed", Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	key, quiet := nethttp.WithKey(keyfuncs.Header("X-API-Key")), nethttp.WithLogger(slog.New(slog.DiscardHandler))
	enforced := nethttp.Middleware(lim, key, quiet, nethttp.WithObserver(c.HTTPObserver()))(ok)
	trial := nethttp.Middleware(dry, key, quiet, nethttp.WithDryRun(), nethttp.WithObserver(c.HTTPObserver()))(ok)
	// FailClosed while the store is down: 503s, not the limit's 429s
	// (issue 36 item 11: both were "denied"); a key error is labelled
	// with the middleware's policy, not "".
	closed := nethttp.Middleware(down, key, quiet, nethttp.WithObserver(c.HTTPObserver()))(ok)
	for _, h := range []http.Handler{enforced, trial, closed} {
		for _, apiKey := range []string{"a", "a", "a", ""} {
			r := httptest.NewRequest("GET", "/", nil)
			if apiKey != "" {
				r.Header.Set("X-API-Key", apiKey)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	want := `
# HELP ratelimit_http_requests_total HTTP requests seen by the middleware, by policy and outcome (allowed, denied, unavailable, dry_run, key_error, error).
# TYPE ratelimit_http_requests_total counter
ratelimit_http_requests_total{outcome="allowed",policy="closed"} 0
ratelimit_http_requests_total{outcome="allowed",policy="trial"} 1
ratelimit_http_requests_total{outcome="allowed",policy="web"} 1
ratelimit_http_requests_total{outcome="denied",policy="closed"} 0
ratelimit_http_requests_total{outcome="denied",policy="trial"} 0
ratelimit_http_requests_total{outcome="denied",policy="web"} 2
ratelimit_http_requests_total{outcome="dry_run",policy="closed"} 0
ratelimit_http_requests_total{outcome="dry_run",policy="trial"} 2
ratelimit_http_requests_total{outcome="dry_run",policy="web"} 0
ratelimit_http_requests_total{outcome="error",policy="closed"} 0
ratelimit_http_requests_total{outcome="error",policy="trial"} 0
ratelimit_http_requests_total{outcome="error",policy="web"} 0
ratelimit_http_requests_total{outcome="key_error",policy="closed"} 1
ratelimit_http_requests_total{outcome="key_error",policy="trial"} 1
ratelimit_http_requests_total{outcome="key_error",policy="web"} 1
ratelimit_http_requests_total{outcome="unavailable",policy="closed"} 3
ratelimit_http_requests_total{outcome="unavailable",policy="trial"} 0
ratelimit_http_requests_total{outcome="unavailable",policy="web"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_http_requests_total"); err != nil {
		t.Error(err)
	}
}

func TestDecisionAllocs(t *testing.T) {
	c := metrics.New()
	events := []core.DecisionEvent{
		{Policy: "p", Allowed: true, Latency: time.Millisecond},
		{Policy: "p", Cached: true},
		{Policy: "p", Degraded: true, Err: core.ErrTimeout, Latency: 50 * time.Millisecond},
	}
	for _, e := range events {
		c.Decision(e) // resolve the policy's children
	}
	for _, e := range events {
		if n := testing.AllocsPerRun(100, func() { c.Decision(e) }); n != 0 {
			t.Errorf("Decision(%+v): %v allocs, want 0", e, n)
		}
	}
}

func TestConcurrentPolicies(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				c.Decision(core.DecisionEvent{Policy: fmt.Sprintf("p%d", (g+i)%5), Allowed: true})
			}
		}()
	}
	for range 8 {
		<-done
	}
	var total float64
	for p := range 5 {
		total += value(t, c, "decisions_total", fmt.Sprintf("p%d", p), "allowed")
	}
	if total != 1600 {
		t.Errorf("total allowed %v, want 1600", total)
	}
}

func BenchmarkDecision(b *testing.B) {
	c := metrics.New()
	e := core.DecisionEvent{Policy: "p", Allowed: true, Latency: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Decision(e)
		}
	})
}

// TestFailLocalInstancesGauge: a FailLocal policy's instance count in
// use, as its decisions give it; other policies have no series.
func TestFailLocalInstancesGauge(t *testing.T) {
	t.Parallel()
	c := metrics.New()
	c.Decision(core.DecisionEvent{Policy: "open", Allowed: true})
	c.Decision(core.DecisionEvent{Policy: "local", Allowed: true, Instances: 3})
	c.Decision(core.DecisionEvent{Policy: "local", Allowed: true, Degraded: true, Instances: 6})
	const want = `
# HELP ratelimit_fail_local_instances FailLocal's instance count in use: its in-process buckets hold the limit divided by it (core.Config.Instances, or the live count learned).
# TYPE ratelimit_fail_local_instances gauge
ratelimit_fail_local_instances{policy="local"} 6
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelimit_fail_local_instances"); err != nil {
		t.Error(err)
	}
}
