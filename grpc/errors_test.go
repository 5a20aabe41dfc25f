package grpc_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// A key error reaches the observer matching ErrKey, which is nethttp's,
// and the KeyFunc's own error.
func TestObservedKeyError(t *testing.T) {
	t.Parallel()
	var obs observations
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(5)), obs.option(),
		ratelimit.WithKey(ratelimit.Metadata("x-api-key")), ratelimit.WithLogger(limitertest.Quiet)))
	s.check(t)
	got := obs.errs()
	if len(got) != 1 || !errors.Is(got[0], ratelimit.ErrKey) || !errors.Is(got[0], nethttp.ErrKey) || !errors.Is(got[0], keyfuncs.ErrMissingHeader) {
		t.Errorf("observed %v; want an error matching ErrKey, nethttp.ErrKey and keyfuncs.ErrMissingHeader", got)
	}
}
