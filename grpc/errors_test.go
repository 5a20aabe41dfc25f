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
// and the KeyFunc's own error, with the policy the call went to (metrics
// label it by policy, as the HTTP middleware's).
func TestObservedKeyError(t *testing.T) {
	t.Parallel()
	var obs observations
	lim := limitertest.NewLimiter(t, core.PerMinute(5))
	s := serveBoth(t, both(lim, obs.option(),
		ratelimit.WithKey(ratelimit.Metadata("x-api-key")), ratelimit.WithLogger(limitertest.Quiet)))
	s.check(t)
	got := obs.all()
	if len(got) != 1 || !errors.Is(got[0].err, ratelimit.ErrKey) || !errors.Is(got[0].err, nethttp.ErrKey) || !errors.Is(got[0].err, keyfuncs.ErrMissingHeader) {
		t.Fatalf("observed %v; want an error matching ErrKey, nethttp.ErrKey and keyfuncs.ErrMissingHeader", got)
	}
	if res := got[0].res; res.Name != lim.Name() || res.Limit != lim.Limit() {
		t.Errorf("a key error observed with policy %q %v; want the limiter's, %q %v", res.Name, res.Limit, lim.Name(), lim.Limit())
	}
}
