package envoy_test

import (
	"context"
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func Example() {
	svc, err := envoy.NewService(envoy.ServiceConfig{Store: core.NewMemoryStore()})
	if err != nil {
		panic(err)
	}
	cfg, err := envoy.ParseConfig([]envoy.File{{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}}, envoy.ConfigOptions{})
	if err != nil {
		panic(err)
	}
	svc.SetConfig(cfg)

	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{{
		Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
}

// A usage limit, as an AI gateway uses it: a check (hits_addend 0) as a
// request starts, the tokens charged when its stream ends, and the next
// check refused while the key owes.
func Example_usage() {
	svc, err := envoy.NewService(envoy.ServiceConfig{Store: core.NewMemoryStore()})
	if err != nil {
		panic(err)
	}
	cfg, err := envoy.ParseConfig([]envoy.File{{Name: "ai.yaml", Data: []byte(`
domain: ai
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1000, usage: true}
`)}}, envoy.ConfigOptions{})
	if err != nil {
		panic(err)
	}
	svc.SetConfig(cfg)

	call := func(hits uint64) {
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "ai", Descriptors: []*rlpb.RateLimitDescriptor{{
			Entries:    []*rlpb.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}})
		if err != nil {
			panic(err)
		}
		fmt.Println(hits, resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	call(0)    // the request starts: a check
	call(1500) // its stream ended: 1500 tokens charged, 500 owed
	call(0)    // the next request: refused until the debt is repaid (about 30s)
	// Output:
	// 0 OK 1000
	// 1500 OK 0
	// 0 OVER_LIMIT 0
}
