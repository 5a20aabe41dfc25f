//go:build !race

package grpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// stream is the ServerTransportStream of a call, as a gRPC server puts it
// in the call's context, doing nothing.
type stream struct{}

func (stream) Method() string               { return "/a.B/C" }
func (stream) SetHeader(metadata.MD) error  { return nil }
func (stream) SendHeader(metadata.MD) error { return nil }
func (stream) SetTrailer(metadata.MD) error { return nil }

// What an allowed call costs the interceptor: the key (a *http.Request
// for keyfuncs' KeyFunc, the key itself, a copy of the forwarding field
// when trusted) and the metadata (its map, one array of values); the
// rate-limit values themselves are formatted once per limiter.
func TestAllocsPerCall(t *testing.T) {
	lim := limitertest.NewLimiter(t, core.PerSecond(1_000_000_000))
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}
	md := metadata.MD{"x-forwarded-for": {"203.0.113.9"}, "x-api-key": {"k"}}
	ctx := grpc.NewContextWithServerTransportStream(callCtx("10.0.0.1:5000", md), stream{})
	for _, tc := range []struct {
		name string
		opts []ratelimit.Option
		max  float64
	}{
		{"peer, draft06 metadata", nil, 6},
		{"peer, no metadata", []ratelimit.Option{ratelimit.WithHeaders(ratelimit.HeadersNone)}, 2},
		{"trusted x-forwarded-for", []ratelimit.Option{ratelimit.WithKey(ratelimit.PeerIP(keyfuncs.TrustedProxies("10.0.0.0/8"))), ratelimit.WithHeaders(ratelimit.HeadersNone)}, 5},
		{"metadata key", []ratelimit.Option{ratelimit.WithKey(ratelimit.Metadata("x-api-key")), ratelimit.WithHeaders(ratelimit.HeadersNone)}, 5},
	} {
		in := ratelimit.UnaryServerInterceptor(lim, tc.opts...)
		if got := testing.AllocsPerRun(1000, func() { _, _ = in(ctx, nil, info, handler) }); got > tc.max {
			t.Errorf("%s: %.1f allocs per call, want at most %.0f", tc.name, got, tc.max)
		}
	}
}
