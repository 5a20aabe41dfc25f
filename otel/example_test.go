package otel_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/otel"
)

// One Observer is the Observer of every limiter. Here OTel's Prometheus
// exporter reads it, and /metrics shows the series package metrics would
// (an OTLP exporter would do as well).
func Example() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	o, err := otel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)))
	if err != nil {
		panic(err)
	}

	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(),
		Limit:    core.PerMinute(2),
		FailMode: core.FailOpen,
		Name:     "api",
		Observer: o,
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "alice")
	}

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
