package grpc

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// refusal is the status of a call the limiter refused: ResourceExhausted,
// or Unavailable for FailClosed's blanket refusal while the store is down
// (a FailLocal refusal is a real, if approximate, limit). Either carries a
// RetryInfo detail with res.RetryAfter, and a message with it rounded up
// to the millisecond.
func refusal(res core.Result) error { return refuse(res, "rate limit exceeded; retry in ") }

// slotRefusal is the status of a call refused because every slot of its
// key is held: refusal's, saying so.
func slotRefusal(res core.Result) error { return refuse(res, "too many calls in flight; retry in ") }

// refuse is refusal with msg starting a ResourceExhausted's message.
func refuse(res core.Result, msg string) error {
	code := codes.ResourceExhausted
	if res.Degraded && !res.Fallback {
		code, msg = codes.Unavailable, "rate limiting is unavailable; retry in "
	}
	d := res.RetryAfter
	msg += ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
	st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		return status.Error(code, msg) // a RetryInfo always marshals
	}
	return st.Err()
}

// failure is the status of a call that could not be decided. A KeyFunc's
// error that carries a status is returned as it is. Otherwise the message
// is fixed, naming at most what was missing: no error text that could
// carry client input reaches the client.
func failure(err error) error {
	var ke *keyError
	if !errors.As(err, &ke) || serverKeyError(ke.err) {
		return status.Error(codes.Internal, "rate limit could not be applied")
	}
	if st, ok := status.FromError(ke.err); ok {
		return st.Err()
	}
	var me *metadataError
	if errors.As(ke.err, &me) {
		return status.Error(codes.InvalidArgument, "missing or invalid rate-limit key: "+me.Error())
	}
	for _, s := range clientErrors {
		if errors.Is(ke.err, s) {
			return status.Error(codes.InvalidArgument, "missing or invalid rate-limit key: "+s.Error())
		}
	}
	return status.Error(codes.InvalidArgument, "missing or invalid rate-limit key")
}

// serverKeyError reports a key error that is the server's, not the
// client's: a KeyFunc that returned "" without an error, a peer that is
// not an IP address, no peer at all.
func serverKeyError(err error) bool {
	return errors.Is(err, errEmptyKey) || errors.Is(err, keyfuncs.ErrInvalidAddr) || errors.Is(err, ErrNoPeer)
}

// clientErrors are the keyfuncs errors a client's call can cause. Their
// text carries no client input, so the status message quotes it.
var clientErrors = []error{
	keyfuncs.ErrMissingHeader, keyfuncs.ErrRepeatedHeader, keyfuncs.ErrValueTooLong,
	keyfuncs.ErrInvalidForwarding, keyfuncs.ErrUnidentifiedClient, keyfuncs.ErrNoUser, keyfuncs.ErrEmptyKey,
}
