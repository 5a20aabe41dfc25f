package main

import (
	"context"
	"strconv"
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

// The reference's series stay bounded whatever values detailed_metric
// labels them with: past maxStatKeys keys, new ones count under
// <domain>.other_keys, as in statsd.
func TestRefMetricsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newRefMetrics(reg, 0.8)
	for i := range maxStatKeys + 100 {
		m.descriptor(envoy.DescriptorEvent{Domain: "api", Key: "api.user_" + strconv.Itoa(i), Hits: 1, Limit: 10})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		if n := len(mf.GetMetric()); n != maxStatKeys+1 {
			t.Errorf("%d keys: %d total_hits series, want %d", maxStatKeys+100, n, maxStatKeys+1)
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "key1" && lp.GetValue() == "other_keys" && mt.GetCounter().GetValue() != 100 {
					t.Errorf("other_keys counted %v hits, want 100", mt.GetCounter().GetValue())
				}
			}
		}
	}
}
