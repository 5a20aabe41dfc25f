package main

import (
	"context"

	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// reporter counts what the reference counts: decided descriptors, config
// loads and failed calls (Prometheus and statsd each have one).
type reporter interface {
	descriptor(envoy.DescriptorEvent)
	configLoaded(ok bool)
	callError(kind string) // redis_error or service_error
}

type reporters []reporter

func (rs reporters) descriptor(e envoy.DescriptorEvent) {
	for _, r := range rs {
		r.descriptor(e)
	}
}

func (rs reporters) configLoaded(ok bool) {
	for _, r := range rs {
		r.configLoaded(ok)
	}
}

// countErrors counts ShouldRateLimit errors as the reference's
// should_rate_limit errors: redis_error for a store that could not decide,
// service_error otherwise (a decision before the first config too).
func (rs reporters) countErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		kind := "service_error"
		if err != errNoConfig && status.Code(err) == codes.Unavailable {
			kind = "redis_error"
		}
		for _, r := range rs {
			r.callError(kind)
		}
	}
	return resp, err
}
