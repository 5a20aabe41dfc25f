package grpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// ConcurrencyUnaryServerInterceptor returns a unary server interceptor
// that lets at most c's Max calls per key run at once, across every
// instance sharing c's store: the call's key (WithKey, default the peer
// address) takes a slot before the handler runs, and gives it back when
// the handler returns or panics, whether or not the client is still there.
// While the handler runs, the slot is renewed in the background
// (core.Lease.KeepAlive).
//
// When every slot is held the call gets codes.ResourceExhausted, "too
// many calls in flight; retry in 1s", with a RetryInfo detail of a second
// (a slot frees whenever a holder finishes; the earliest lease end is only
// an upper bound); codes.Unavailable when the store is down and c is
// core.FailClosed. The header metadata describes slots: ratelimit-limit
// is Max, ratelimit-remaining the slots left free, and no
// ratelimit-policy that would read as a rate (nethttp.NewConcurrencyFields).
// With a Rate (core.ConcurrencyConfig.Rate: a slot and a token, or
// neither), it is the Rate's, and a refusal for lack of tokens is the
// Rate's ("rate limit exceeded", its wait); one by the slots alone is as
// above.
//
// The options are WithKey, WithSkip, WithDryRun (every call goes on; a
// refused one holds no slot), WithObserver, WithHeaders and WithLogger.
// WithCost, WithMethods and WithAlso do not apply to an in-flight limit:
// it panics when given one, as it does when c or an option is nil.
func ConcurrencyUnaryServerInterceptor(c *core.Concurrency, opts ...Option) grpc.UnaryServerInterceptor {
	in := newConcurrencyInterceptor(c, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lease, md, err := in.acquire(ctx, info.FullMethod)
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		defer lease.Release(ctx) // nil-safe; never cancelled by ctx; a failure ends the lease by itself
		return handler(ctx, req)
	}
}

// ConcurrencyStreamServerInterceptor is ConcurrencyUnaryServerInterceptor
// for streams: a stream takes its slot when it opens and holds it until
// its handler returns, when the stream ends, however long that is.
func ConcurrencyStreamServerInterceptor(c *core.Concurrency, opts ...Option) grpc.StreamServerInterceptor {
	in := newConcurrencyInterceptor(c, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		lease, md, err := in.acquire(ctx, info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		return handler(srv, ss)
	}
}

// concurrencyInterceptor is the behaviour of the in-flight interceptors.
type concurrencyInterceptor struct {
	*interceptor
	c      *core.Concurrency
	fields *nethttp.Fields
}

func newConcurrencyInterceptor(c *core.Concurrency, opts []Option) *concurrencyInterceptor {
	if c == nil {
		panic("grpc: nil *core.Concurrency")
	}
	in := &concurrencyInterceptor{interceptor: newInterceptor(opts), c: c}
	switch {
	case in.cost != nil:
		panic("grpc: WithCost does not apply to an in-flight limit")
	case in.methods != nil:
		panic("grpc: WithMethods does not apply to an in-flight limit: WithSkip limits some methods only")
	case in.also != nil:
		panic("grpc: WithAlso does not apply to an in-flight limit")
	}
	in.fields = nethttp.NewConcurrencyFields(c, in.style)
	return in
}

// acquire takes a slot for a call to fullMethod. It returns the lease to
// release when the call ends (nil when nothing is held), the header
// metadata to send, and the status error refusing the call.
func (in *concurrencyInterceptor) acquire(ctx context.Context, fullMethod string) (*core.Lease, metadata.MD, error) {
	policy := core.Result{Limit: in.c.Limit(), Name: in.c.Name()}
	key, skip, err := in.keyOf(ctx, fullMethod, policy)
	if skip || err != nil {
		return nil, nil, err
	}
	lease, res, err := in.c.Acquire(ctx, key)
	if err != nil {
		return nil, nil, in.fail(ctx, fullMethod, policy, err)
	}
	if in.observe != nil {
		in.observe(ctx, fullMethod, res, nil, in.dryRun)
	}
	md := in.metadata(in.fields, res)
	switch {
	case lease != nil:
		lease.KeepAlive()
		return lease, md, nil
	case in.dryRun:
		return nil, md, nil
	}
	if res, slots := in.fields.Refusal(res); slots {
		return nil, md, slotRefusal(res)
	}
	return nil, md, refusal(res)
}
