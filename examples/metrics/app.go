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

// newApp returns the app: /api/hello and /search limited on store, and
// /metrics, served from a registry of its own.
func newApp(store core.Store) (http.Handler, error) {
	// One Collector observes every limiter; register it once.
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	api, err := core.New(core.Config{Store: store, Limit: core.PerSecond(5), Name: "api", FailMode: core.FailOpen, Observer: m})
	if err != nil {
		return nil, err
	}
	search, err := core.New(core.Config{Store: store, Limit: core.PerSecond(2), Name: "search-trial", FailMode: core.FailOpen, Observer: m})
	if err != nil {
		return nil, err
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello\n")) })
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", ratelimit.Middleware(api, ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /search", ratelimit.Middleware(search, ratelimit.WithDryRun(), ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}
