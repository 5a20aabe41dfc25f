package envoy_test

import (
	"context"
	"fmt"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/envoy"
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
	// The bucket an app's middleware shares: core.Config{Name: rule.Name}, key subject.
	rule, subject := cfg.Match("api", []envoy.Entry{{Key: "user", Value: "alice"}})
	fmt.Println(rule.Name, subject)
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
	// api.user alice
}
