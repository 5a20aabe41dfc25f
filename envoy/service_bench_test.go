package envoy

import (
	"strconv"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// benchYAML is bench/envoy's config: limits no request reaches.
const benchYAML = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// BenchmarkShouldRateLimit drives ShouldRateLimit in process, as bench/envoy
// does through gRPC: 1 or 3 descriptors (address, tenant, route) over
// 10,000 keys, on the memory store and on Redis. Its allocations are the
// service's and core's, without gRPC's.
func BenchmarkShouldRateLimit(b *testing.B) {
	c, err := ParseConfig([]File{{"bench.yaml", []byte(benchYAML)}}, ConfigOptions{})
	if err != nil {
		b.Fatal(err)
	}
	stores := map[string]func(b *testing.B) core.Store{
		"memory": func(*testing.B) core.Store { return core.NewMemoryStore() },
		"redis": func(b *testing.B) core.Store {
			rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), ContextTimeoutEnabled: true})
			b.Cleanup(func() { rc.Close() })
			return core.NewRedisStore(rc, core.WithPrefix(redistest.Prefix(b)))
		},
	}
	for _, store := range []string{"memory", "redis"} {
		for _, n := range []int{1, 3} {
			b.Run(store+"/"+strconv.Itoa(n), func(b *testing.B) {
				s, err := NewService(ServiceConfig{Store: stores[store](b)})
				if err != nil {
					b.Fatal(err)
				}
				s.SetConfig(c)
				reqs := make([]*rlspb.RateLimitRequest, 10000)
				for i := range reqs {
					kv := []string{"remote_address", strconv.Itoa(i), "tenant", strconv.Itoa(i / 10), "route", strconv.Itoa(i % 10)}
					r := &rlspb.RateLimitRequest{Domain: "bench"}
					for j := 0; j < n; j++ {
						r.Descriptors = append(r.Descriptors, &rlpb.RateLimitDescriptor{
							Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: kv[2*j], Value: kv[2*j+1]}},
						})
					}
					reqs[i] = r
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						resp, err := s.ShouldRateLimit(b.Context(), reqs[i%len(reqs)])
						if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
							b.Errorf("%v %v", resp, err)
							return
						}
						i += 7
					}
				})
			})
		}
	}
}
