package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
)

// One Collector is the Observer of every limiter and is registered once;
// /metrics then shows each policy's decisions.
func Example() {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(),
		Limit:    core.PerMinute(2),
		FailMode: core.FailOpen,
		Name:     "api",
		Observer: m,
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "alice")
	}

	// What a scrape of promhttp.HandlerFor(reg, …) at /metrics returns.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ratelimit_decisions_total") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// ratelimit_decisions_total{outcome="allowed",policy="api"} 2
	// ratelimit_decisions_total{outcome="degraded_allowed",policy="api"} 0
	// ratelimit_decisions_total{outcome="degraded_denied",policy="api"} 0
	// ratelimit_decisions_total{outcome="degraded_would_deny",policy="api"} 0
	// ratelimit_decisions_total{outcome="denied",policy="api"} 1
	// ratelimit_decisions_total{outcome="would_deny",policy="api"} 0
}
