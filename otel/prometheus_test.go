package otel_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/metrics"
	"github.com/sluicehq/ratelimit/nethttp"
	"github.com/sluicehq/ratelimit/otel"
)

// tee tells every one of its Observers, and lease events to those that
// are LeaseObservers.
type tee []core.Observer

func (t tee) Leases(e core.LeaseEvent) {
	for _, o := range t {
		if l, ok := o.(core.LeaseObserver); ok {
			l.Leases(e)
		}
	}
}

func (t tee) Decision(e core.DecisionEvent) {
	for _, o := range t {
		o.Decision(e)
	}
}

func (t tee) BreakerChange(policy string, open bool) {
	for _, o := range t {
		o.BreakerChange(policy, open)
	}
}

// TestPrometheusSeries is the proof of the names: the same traffic seen by
// a metrics.Collector and by an Observer read by OTel's Prometheus
// exporter gives the same series (names, types, help, label sets and
// values), under each translation strategy that adds suffixes. The
// differences are the exporter's own (target_info and otel_scope_* labels,
// which options turn off) and the latency histograms of policies that
// never asked a store, which OTel cannot create empty.
func TestPrometheusSeries(t *testing.T) {
	t.Parallel()
	scopeLabels := []string{"otel_scope_name", "otel_scope_schema_url", "otel_scope_version"}
	for _, tc := range []struct {
		name       string
		opts       []otelprom.Option
		targetInfo bool // a target_info family
		scope      bool // otel_scope_* labels on every series
	}{
		{"default", nil, true, true},
		{"without target and scope info", []otelprom.Option{otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo()}, false, false},
		{"UTF-8 strategy", []otelprom.Option{otelprom.WithTranslationStrategy(otlptranslator.NoUTF8EscapingWithSuffixes), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo()}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			promReg, otelReg := prometheus.NewPedanticRegistry(), prometheus.NewRegistry()
			collector := metrics.New()
			promReg.MustRegister(collector)
			exporter, err := otelprom.New(append([]otelprom.Option{otelprom.WithRegisterer(otelReg)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			observer, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)))
			if err != nil {
				t.Fatal(err)
			}
			traffic(t, tee{collector, observer}, collector.HTTPObserver(), observer.HTTPObserver())

			want, got := gather(t, promReg), gather(t, otelReg)
			// The in-flight series are compared too: package metrics has
			// them, with the traffic's values.
			for name, v := range map[string]string{"ratelimit_inflight_held": "2", "ratelimit_lease_renewals_total": "2", "ratelimit_lease_expiries_total": "1"} {
				if fam := want[name]; fam == nil || fam.series[`policy="slots"`] != v {
					t.Errorf("metrics: %s: %+v, want policy=\"slots\" at %s", name, fam, v)
				}
			}
			if tc.targetInfo {
				if _, ok := got["target_info"]; !ok {
					t.Error("no target_info")
				}
				delete(got, "target_info")
			}
			for name, fam := range got {
				series := map[string]string{}
				for s, v := range fam.series {
					labels, ok := withoutLabels(s, scopeLabels)
					if ok != tc.scope {
						t.Errorf("%s{%s}: otel_scope_* labels %v, want %v", name, s, ok, tc.scope)
					}
					series[labels] = v
				}
				fam.series = series
			}
			// Only in package metrics: the empty latency histograms of the
			// policies on a memory store.
			for _, policy := range []string{"mem", "slots", "web", "trial"} {
				s := fmt.Sprintf(`policy=%q`, policy)
				if v := want["ratelimit_store_latency_seconds"].series[s]; v != "count=0 sum=0 le0.0001=0 le0.00025=0 le0.0005=0 le0.001=0 le0.0025=0 le0.005=0 le0.01=0 le0.025=0 le0.05=0 le0.1=0" {
					t.Errorf("metrics: latency of %s: %s, want an empty histogram", policy, v)
				}
				delete(want["ratelimit_store_latency_seconds"].series, s)
			}

			for _, name := range slices.Sorted(maps.Keys(want)) {
				w, g := want[name], got[name]
				if g == nil {
					t.Errorf("%s: missing", name)
					continue
				}
				if g.head != w.head {
					t.Errorf("%s: got %s, want %s", name, g.head, w.head)
				}
				for _, s := range slices.Sorted(maps.Keys(w.series)) {
					if g.series[s] != w.series[s] {
						t.Errorf("%s{%s}: got %q, want %q", name, s, g.series[s], w.series[s])
					}
				}
				for s := range g.series {
					if _, ok := w.series[s]; !ok {
						t.Errorf("%s{%s}: only in OTel's", name, s)
					}
				}
				if tc.name == "default" {
					t.Logf("%s %s: %d series, labels %s", name, strings.SplitN(g.head, " ", 2)[0], len(g.series), labelNames(g.series))
				}
			}
			for name := range got {
				if want[name] == nil {
					t.Errorf("%s: only in OTel's", name)
				}
			}
		})
	}
}

// traffic runs limiters on a MemoryStore, on miniredis and on a failing
// store, a dry-run check, a Concurrency (slots held, refused, expired and
// renewed) and two HTTP middlewares, all observed by o, the middlewares
// also by each of httpObservers.
func traffic(t *testing.T, o core.Observer, httpObservers ...func(*http.Request, core.Result, error, bool)) {
	t.Helper()
	ctx := context.Background()
	newLimiter := func(cfg core.Config) *core.Limiter {
		t.Helper()
		cfg.Observer = o
		if cfg.Limit == (core.Limit{}) {
			cfg.Limit = core.PerHour(2)
		}
		return limitertest.New(t, cfg)
	}
	client := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { client.Close() })
	remote := newLimiter(core.Config{Store: core.NewRedisStore(client), FailMode: core.FailOpen, Name: "redis", Timeout: time.Second})
	mem := newLimiter(core.Config{Store: core.NewMemoryStore(), FailMode: core.FailOpen, Name: "mem"})
	down := newLimiter(core.Config{Store: limitertest.NewDownStore(), FailMode: core.FailClosed, Name: "down", BreakerFailures: 2})
	for _, lim := range []*core.Limiter{remote, mem} {
		for range 4 {
			lim.Allow(ctx, "alice")
		}
	}
	for range 4 {
		down.Allow(ctx, "alice")
	}
	for range 3 {
		mem.Allow(core.WithDryRun(ctx), "bob")
	}
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	slots, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(core.WithClock(clock)), Name: "slots", Max: 1, Lease: 30 * time.Second, FailMode: core.FailClosed, Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	lease, _, _ := slots.Acquire(ctx, "alice")
	slots.Acquire(ctx, "alice") // every slot held: denied
	lease.Release(ctx)
	slots.Acquire(ctx, "alice") // a holder that stops renewing
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	slots.Acquire(ctx, "alice") // prunes the stale lease: an expiry
	// Renewal rounds run on the wall clock; this is one's report.
	o.(core.LeaseObserver).Leases(core.LeaseEvent{Policy: "slots", Renewed: 2})

	observe := func(r *http.Request, res core.Result, err error, dryRun bool) {
		for _, f := range httpObservers {
			f(r, res, err, dryRun)
		}
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	opts := []nethttp.Option{nethttp.WithKey(keyfuncs.Header("X-API-Key")), nethttp.WithLogger(limitertest.Quiet), nethttp.WithObserver(observe)}
	web := nethttp.Middleware(newLimiter(core.Config{Store: core.NewMemoryStore(), FailMode: core.FailOpen, Name: "web"}), opts...)(ok)
	trial := nethttp.Middleware(newLimiter(core.Config{Store: core.NewMemoryStore(), FailMode: core.FailOpen, Name: "trial"}), append(opts, nethttp.WithDryRun())...)(ok)
	for _, h := range []http.Handler{web, trial} {
		for _, apiKey := range []string{"a", "a", "a", ""} {
			r := httptest.NewRequest("GET", "/", nil)
			if apiKey != "" {
				r.Header.Set("X-API-Key", apiKey)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
}

// family is one gathered metric family: "TYPE help" and, by label set
// (`name="value"`, comma-separated, sorted), the series' values.
type family struct {
	head   string
	series map[string]string
}

func gather(t *testing.T, g prometheus.Gatherer) map[string]*family {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*family{}
	for _, f := range families {
		fam := &family{head: f.GetType().String() + " " + f.GetHelp(), series: map[string]string{}}
		for _, m := range f.GetMetric() {
			fam.series[labelSet(m.GetLabel())] = value(m)
		}
		out[f.GetName()] = fam
	}
	return out
}

func labelSet(lps []*dto.LabelPair) string {
	var s []string
	for _, lp := range lps {
		s = append(s, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func value(m *dto.Metric) string {
	switch {
	case m.GetCounter() != nil:
		return fmt.Sprint(m.GetCounter().GetValue())
	case m.GetGauge() != nil:
		return fmt.Sprint(m.GetGauge().GetValue())
	case m.GetHistogram() != nil:
		h := m.GetHistogram()
		s := fmt.Sprintf("count=%d sum=%v", h.GetSampleCount(), h.GetSampleSum())
		for _, b := range h.GetBucket() {
			s += fmt.Sprintf(" le%v=%d", b.GetUpperBound(), b.GetCumulativeCount())
		}
		return s
	}
	return "untyped"
}

// withoutLabels returns the label set s without the labels named drop, and
// whether it had all of them.
func withoutLabels(s string, drop []string) (string, bool) {
	var kept []string
	n := 0
	for _, l := range strings.Split(s, ",") {
		if slices.ContainsFunc(drop, func(d string) bool { return strings.HasPrefix(l, d+"=") }) {
			n++
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, ","), n == len(drop)
}

// labelNames returns the label names of series, which all have the same.
func labelNames(series map[string]string) []string {
	for s := range series {
		var names []string
		for _, l := range strings.Split(s, ",") {
			names = append(names, strings.SplitN(l, "=", 2)[0])
		}
		return names
	}
	return nil
}
