package main

import (
	"context"
	"testing"

	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/grpc"
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

// BenchmarkStatsdServerCalls counts one call in the reference's statsd
// server stats, its counter and timer cached (see statsdStats.calls).
func BenchmarkStatsdServerCalls(b *testing.B) {
	store := gostats.NewStore(gostats.NewNullSink(), false)
	m := &statsdStats{server: store.Scope("ratelimit_server"), calls: make(map[string]*callStats)}
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	h := func(ctx context.Context, req any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		m.serverCalls(context.Background(), nil, info, h)
	}
}
