package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

// newApp returns the app: /api/hello and /search, limited by limiters made
// from base (the store and anything else they share), /export, at most 2
// at once per client on base's store, and /metrics, served from a
// registry of its own.
func newApp(base core.Config) (http.Handler, error) {
	// One Collector observes every limiter; register it once.
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	base.FailMode, base.Observer = core.FailOpen, m
	api, err := limiter(base, "api", core.PerSecond(5))
	if err != nil {
		return nil, err
	}
	search, err := limiter(base, "search-trial", core.PerSecond(2))
	if err != nil {
		return nil, err
	}

	// The Collector follows its slots too: it is a core.LeaseObserver.
	export, err := core.NewConcurrency(core.ConcurrencyConfig{Store: base.Store, Name: "export", Max: 2, FailMode: core.FailOpen, Timeout: base.Timeout, Observer: m})
	if err != nil {
		return nil, err
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello\n")) })
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", ratelimit.Middleware(api, ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /search", ratelimit.Middleware(search, ratelimit.WithDryRun(), ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /export", ratelimit.Concurrency(export, ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}

// limiter returns a limiter of base with its own name and limit.
func limiter(base core.Config, name string, l core.Limit) (*core.Limiter, error) {
	base.Name, base.Limit = name, l
	return core.New(base)
}
