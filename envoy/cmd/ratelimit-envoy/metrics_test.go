package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/envoy"
)

// BenchmarkRefMetricsDescriptor counts one descriptor in the reference's
// Prometheus series, its counters cached (see refMetrics.keys).
func BenchmarkRefMetricsDescriptor(b *testing.B) {
	m := newRefMetrics(prometheus.NewRegistry(), 0.8)
	e := envoy.DescriptorEvent{Domain: "bench", Key: "bench.remote_address", Hits: 1, Limit: 100, Remaining: 50}
	b.ReportAllocs()
	for b.Loop() {
		m.descriptor(e)
	}
}
