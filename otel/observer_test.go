package otel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
	"github.com/sluicehq/ratelimit/otel"
)

// newObserver returns an Observer on a MeterProvider read by the returned
// ManualReader.
func newObserver(t *testing.T) (*otel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	o, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	return o, reader
}

// point is one data point: a sum's or gauge's value, or a histogram's
// count, sum and bucket counts.
type point struct {
	value   float64
	count   uint64
	sum     float64
	buckets []uint64
}

// collect returns every data point the reader holds, keyed by
// `instrument{attr=value,…}` with attributes sorted by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/sluicehq/ratelimit/otel" {
			t.Errorf("scope %q, want github.com/sluicehq/ratelimit/otel", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				// Every sum is a counter but the up-down count of slots held.
				if d.IsMonotonic == (m.Name == "ratelimit_inflight_held") || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: monotonic %v, temporality %v", m.Name, d.IsMonotonic, d.Temporality)
				}
				for _, dp := range d.DataPoints {
					got[key(m.Name, dp.Attributes)] = point{value: float64(dp.Value)}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					got[key(m.Name, dp.Attributes)] = point{value: float64(dp.Value)}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[key(m.Name, dp.Attributes)] = point{count: dp.Count, sum: dp.Sum, buckets: dp.BucketCounts}
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got
}

func key(name string, set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() { // sorted by key
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}

// values returns the value of each of keys in points; -1 for a missing one.
func values(points map[string]point, keys ...string) []float64 {
	var out []float64
	for _, k := range keys {
		p, ok := points[k]
		if !ok {
			out = append(out, -1)
			continue
		}
		out = append(out, p.value)
	}
	return out
}

func TestDecisionOutcomes(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	events := []core.DecisionEvent{
		{Policy: "api", Allowed: true, Latency: 300 * time.Microsecond},
		{Policy: "api", Allowed: true, Latency: 2 * time.Millisecond},
		{Policy: "api", Latency: time.Millisecond},
		{Policy: "api", Cached: true},
		{Policy: "api", Allowed: true, Degraded: true, Latency: 50 * time.Millisecond, Err: fmt.Errorf("wrapped: %w", core.ErrTimeout)},
		{Policy: "api", Degraded: true, Err: core.ErrCircuitOpen},
		{Policy: "api", Allowed: true, Degraded: true, Err: core.ErrOverloaded},
		{Policy: "api", Allowed: true, Degraded: true, Latency: time.Millisecond, Err: errors.New("dial tcp: connection refused")},
		{Policy: "api", DryRun: true},
		{Policy: "api", DryRun: true, Degraded: true, Err: core.ErrCircuitOpen},
		{Policy: "login", Allowed: true},
	}
	for _, e := range events {
		o.Decision(e)
	}
	got := collect(t, reader)
	tests := []struct {
		key  string
		want float64
	}{
		{"ratelimit_decisions{outcome=allowed,policy=api}", 2},
		{"ratelimit_decisions{outcome=denied,policy=api}", 2}, // the cached one included
		{"ratelimit_decisions{outcome=degraded_allowed,policy=api}", 3},
		{"ratelimit_decisions{outcome=degraded_denied,policy=api}", 1},
		{"ratelimit_decisions{outcome=would_deny,policy=api}", 1},
		{"ratelimit_decisions{outcome=degraded_would_deny,policy=api}", 1},
		{"ratelimit_decisions{outcome=allowed,policy=login}", 1},
		{"ratelimit_decisions{outcome=denied,policy=login}", 0}, // at zero from the first decision
		{"ratelimit_denial_cache_hits{policy=api}", 1},
		{"ratelimit_denial_cache_hits{policy=login}", 0},
		{"ratelimit_store_errors{kind=timeout,policy=api}", 1},
		{"ratelimit_store_errors{kind=circuit_open,policy=api}", 2},
		{"ratelimit_store_errors{kind=overloaded,policy=api}", 1},
		{"ratelimit_store_errors{kind=other,policy=api}", 1},
		{"ratelimit_store_errors{kind=other,policy=login}", 0},
		{"ratelimit_breaker_open{policy=api}", 0},
	}
	for _, tt := range tests {
		if got := values(got, tt.key)[0]; got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.key, got, tt.want)
		}
	}
	// 6 outcomes, 1 cache hits, 4 error kinds and 1 gauge per policy, and
	// the histogram for api only: login never asked the store.
	if n := len(got); n != 2*12+1 {
		t.Errorf("%d data points, want %d", n, 2*12+1)
	}
	h := got["ratelimit_store_latency{policy=api}"]
	// Bounds 0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1.
	wantBuckets := []uint64{0, 0, 1, 2, 1, 0, 0, 0, 1, 0, 0}
	if h.count != 5 || !slices.Equal(h.buckets, wantBuckets) {
		t.Errorf("latency: count %d, buckets %v; want 5, %v", h.count, h.buckets, wantBuckets)
	}
	if want := 0.0543; h.sum < want-1e-9 || h.sum > want+1e-9 {
		t.Errorf("latency sum %v, want %v", h.sum, want)
	}
}

func TestBreakerGauge(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	o.Decision(core.DecisionEvent{Policy: "p", Allowed: true})
	steps := []struct {
		change func()
		p, q   float64 // -1: no data point
	}{
		{func() {}, 0, -1},
		{func() { o.BreakerChange("p", true) }, 1, -1},
		{func() { o.BreakerChange("q", true) }, 1, 1},
		{func() { o.BreakerChange("p", false) }, 0, 1},
	}
	for i, s := range steps {
		s.change()
		got := values(collect(t, reader), "ratelimit_breaker_open{policy=p}", "ratelimit_breaker_open{policy=q}")
		if want := []float64{s.p, s.q}; !slices.Equal(got, want) {
			t.Errorf("step %d: p, q = %v, want %v", i, got, want)
		}
	}
}

// TestWithLimiters drives limiters on a MemoryStore, on miniredis and on a
// store that always fails, and a Concurrency, through one Observer.
func TestWithLimiters(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	ctx := context.Background()
	newLimiter := func(cfg core.Config) *core.Limiter {
		t.Helper()
		cfg.Observer, cfg.Limit = o, core.PerHour(2)
		return limitertest.New(t, cfg)
	}
	mem := newLimiter(core.Config{Store: core.NewMemoryStore(), FailMode: core.FailOpen, Name: "mem"})
	client := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { client.Close() })
	// A second per decision, not 50ms: under -race on a busy machine
	// miniredis can be slower than that.
	remote := newLimiter(core.Config{Store: core.NewRedisStore(client), FailMode: core.FailOpen, Name: "redis", Timeout: time.Second})
	down := newLimiter(core.Config{Store: limitertest.NewDownStore(), FailMode: core.FailClosed, Name: "down", BreakerFailures: 2})
	for _, lim := range []*core.Limiter{mem, remote} {
		for range 5 {
			lim.Allow(ctx, "alice")
		}
	}
	for range 4 {
		down.Allow(ctx, "alice")
	}
	slots, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "slots", Max: 1, FailMode: core.FailClosed, Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	lease, _, _ := slots.Acquire(ctx, "alice")
	slots.Acquire(ctx, "alice") // all slots held: denied
	lease.Release(ctx)

	got := collect(t, reader)
	tests := []struct {
		key  string
		want float64
	}{
		{"ratelimit_decisions{outcome=allowed,policy=mem}", 2},
		{"ratelimit_decisions{outcome=denied,policy=mem}", 3},
		{"ratelimit_decisions{outcome=allowed,policy=redis}", 2},
		{"ratelimit_decisions{outcome=denied,policy=redis}", 3},
		{"ratelimit_decisions{outcome=degraded_allowed,policy=redis}", 0},
		{"ratelimit_decisions{outcome=degraded_denied,policy=down}", 4},
		{"ratelimit_store_errors{kind=other,policy=down}", 2},        // the two calls that opened the breaker
		{"ratelimit_store_errors{kind=circuit_open,policy=down}", 2}, // the two it kept uncalled
		{"ratelimit_breaker_open{policy=down}", 1},
		{"ratelimit_breaker_open{policy=redis}", 0},
		{"ratelimit_decisions{outcome=allowed,policy=slots}", 1},
		{"ratelimit_decisions{outcome=denied,policy=slots}", 1},
	}
	for _, tt := range tests {
		if got := values(got, tt.key)[0]; got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.key, got, tt.want)
		}
	}
	// Every redis decision asked the store (the two allowed at least) or
	// the denial cache.
	h, hits := got["ratelimit_store_latency{policy=redis}"], got["ratelimit_denial_cache_hits{policy=redis}"].value
	if float64(h.count)+hits != 5 || h.count < 2 {
		t.Errorf("redis: %d store calls timed and %v cache hits, want 5 in all, at least 2 timed", h.count, hits)
	}
	if _, ok := got["ratelimit_store_latency{policy=mem}"]; ok {
		t.Error("a latency data point for the memory store, which is never asked")
	}
	for k := range got {
		if strings.Contains(k, "alice") {
			t.Errorf("%s carries the client's key", k)
		}
	}
}

// TestLeases: an in-flight limit's slots held, renewals and expiries, at
// zero from its first lease event, labelled by its Name alone; a
// Limiter's policy has none of them.
func TestLeases(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	o.Decision(core.DecisionEvent{Policy: "api", Allowed: true})
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(core.WithClock(clock)), Name: "exports", Max: 2, Lease: 30 * time.Second, FailMode: core.FailClosed, Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _, _ := c.Acquire(ctx, "client-secret-key")
	if l, _, _ := c.Acquire(ctx, "client-secret-key"); l == nil {
		t.Fatal("no second slot of 2")
	}
	if l, _, _ := c.Acquire(ctx, "client-secret-key"); l != nil {
		t.Fatal("a third slot of 2")
	}
	_ = a.Release(ctx)
	_ = a.Release(ctx) // counted once
	// The second holder dies: its lease ends, and the next acquire prunes it.
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	if l, _, _ := c.Acquire(ctx, "client-secret-key"); l == nil {
		t.Fatal("no slot after the leases ended")
	}
	o.Leases(core.LeaseEvent{Policy: "exports", Renewed: 3})
	got := collect(t, reader)
	tests := []struct {
		key  string
		want float64 // -1: no data point
	}{
		{"ratelimit_inflight_held{policy=exports}", 2}, // 3 acquired, 1 released
		{"ratelimit_lease_renewals{policy=exports}", 3},
		{"ratelimit_lease_expiries{policy=exports}", 1},
		{"ratelimit_decisions{outcome=allowed,policy=exports}", 3},
		{"ratelimit_decisions{outcome=denied,policy=exports}", 1},
		{"ratelimit_inflight_held{policy=api}", -1},
		{"ratelimit_lease_renewals{policy=api}", -1},
		{"ratelimit_lease_expiries{policy=api}", -1},
	}
	for _, tt := range tests {
		if got := values(got, tt.key)[0]; got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.key, got, tt.want)
		}
	}
	for k := range got {
		if strings.Contains(k, "client-secret-key") {
			t.Errorf("%s carries the client's key", k)
		}
	}

	// The first event makes all three, at zero.
	o.Leases(core.LeaseEvent{Policy: "fresh", Held: 1})
	got = collect(t, reader)
	if v := values(got, "ratelimit_inflight_held{policy=fresh}", "ratelimit_lease_renewals{policy=fresh}", "ratelimit_lease_expiries{policy=fresh}"); !slices.Equal(v, []float64{1, 0, 0}) {
		t.Errorf("fresh: held, renewals, expiries = %v, want [1 0 0]", v)
	}
}

func TestHTTPObserver(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	newLimiter := func(name string) *core.Limiter {
		return limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: name})
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	key, quiet := nethttp.WithKey(keyfuncs.Header("X-API-Key")), nethttp.WithLogger(slog.New(slog.DiscardHandler))
	enforced := nethttp.Middleware(newLimiter("web"), key, quiet, nethttp.WithObserver(o.HTTPObserver()))(ok)
	trial := nethttp.Middleware(newLimiter("trial"), key, quiet, nethttp.WithDryRun(), nethttp.WithObserver(o.HTTPObserver()))(ok)
	// FailClosed while the store is down: unavailable, not denied; key
	// errors carry the middleware's policy (issue 36 item 11).
	down := limitertest.New(t, core.Config{Store: &limitertest.DownStore{}, Limit: core.PerHour(1), FailMode: core.FailClosed, Name: "closed", Instances: 1})
	closed := nethttp.Middleware(down, key, quiet, nethttp.WithObserver(o.HTTPObserver()))(ok)
	for _, h := range []http.Handler{enforced, trial, closed} {
		for _, apiKey := range []string{"a", "a", "a", ""} {
			r := httptest.NewRequest("GET", "/", nil)
			if apiKey != "" {
				r.Header.Set("X-API-Key", apiKey)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	got := collect(t, reader)
	want := map[string]point{
		"ratelimit_http_requests{outcome=allowed,policy=trial}":      {value: 1},
		"ratelimit_http_requests{outcome=allowed,policy=web}":        {value: 1},
		"ratelimit_http_requests{outcome=allowed,policy=closed}":     {value: 0},
		"ratelimit_http_requests{outcome=denied,policy=trial}":       {value: 0},
		"ratelimit_http_requests{outcome=denied,policy=web}":         {value: 2},
		"ratelimit_http_requests{outcome=denied,policy=closed}":      {value: 0},
		"ratelimit_http_requests{outcome=unavailable,policy=trial}":  {value: 0},
		"ratelimit_http_requests{outcome=unavailable,policy=web}":    {value: 0},
		"ratelimit_http_requests{outcome=unavailable,policy=closed}": {value: 3},
		"ratelimit_http_requests{outcome=dry_run,policy=trial}":      {value: 2},
		"ratelimit_http_requests{outcome=dry_run,policy=web}":        {value: 0},
		"ratelimit_http_requests{outcome=dry_run,policy=closed}":     {value: 0},
		"ratelimit_http_requests{outcome=error,policy=trial}":        {value: 0},
		"ratelimit_http_requests{outcome=error,policy=web}":          {value: 0},
		"ratelimit_http_requests{outcome=error,policy=closed}":       {value: 0},
		"ratelimit_http_requests{outcome=key_error,policy=trial}":    {value: 1},
		"ratelimit_http_requests{outcome=key_error,policy=web}":      {value: 1},
		"ratelimit_http_requests{outcome=key_error,policy=closed}":   {value: 1},
	}
	if len(got) != len(want) {
		t.Errorf("%d data points, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g.value != w.value {
			t.Errorf("%s: got %v (present %v), want %v", k, g.value, ok, w.value)
		}
	}
}

func TestNew(t *testing.T) {
	// Not parallel: it reads the global MeterProvider.
	if _, err := otel.New(nil); err != nil {
		t.Errorf("New(nil): %v", err)
	}
}

func TestDecisionAllocs(t *testing.T) {
	o, _ := newObserver(t)
	events := []core.DecisionEvent{
		{Policy: "p", Allowed: true, Latency: time.Millisecond},
		{Policy: "p", Cached: true},
		{Policy: "p", Degraded: true, Err: core.ErrTimeout, Latency: 50 * time.Millisecond},
	}
	for _, e := range events {
		o.Decision(e) // make the policy's attribute sets
	}
	for _, e := range events {
		if n := testing.AllocsPerRun(100, func() { o.Decision(e) }); n != 0 {
			t.Errorf("Decision(%+v): %v allocs, want 0", e, n)
		}
	}
}

func TestLeasesAllocs(t *testing.T) {
	o, _ := newObserver(t)
	events := []core.LeaseEvent{
		{Policy: "p", Held: 1},
		{Policy: "p", Held: -1},
		{Policy: "p", Held: 1, Expired: 2},
		{Policy: "p", Renewed: 5, Expired: 1},
	}
	o.Leases(events[0]) // make the policy's attribute sets and series
	for _, e := range events {
		if n := testing.AllocsPerRun(100, func() { o.Leases(e) }); n != 0 {
			t.Errorf("Leases(%+v): %v allocs, want 0", e, n)
		}
	}
}

func TestConcurrentPolicies(t *testing.T) {
	t.Parallel()
	o, reader := newObserver(t)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				o.Decision(core.DecisionEvent{Policy: fmt.Sprintf("p%d", (g+i)%5), Allowed: true})
				if i%50 == 0 {
					o.BreakerChange(fmt.Sprintf("p%d", i%5), i%100 == 0)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	got := collect(t, reader)
	var total float64
	for p := range 5 {
		total += values(got, fmt.Sprintf("ratelimit_decisions{outcome=allowed,policy=p%d}", p))[0]
	}
	if total != 1600 {
		t.Errorf("total allowed %v, want 1600", total)
	}
}

func BenchmarkDecision(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	o, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		b.Fatal(err)
	}
	e := core.DecisionEvent{Policy: "p", Allowed: true, Latency: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Decision(e)
		}
	})
}
