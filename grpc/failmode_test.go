package grpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// redisLimiter returns a limiter of lim with mode on a RedisStore of client.
func redisLimiter(t *testing.T, client redis.UniversalClient, prefix string, lim core.Limit, mode core.FailMode) *core.Limiter {
	t.Helper()
	// A second for each decision, not the default 50ms: under -race on a
	// busy machine miniredis can be slower than that.
	return limitertest.New(t, core.Config{
		Store: core.NewRedisStore(client, core.WithPrefix(prefix)), Limit: lim, FailMode: mode, Instances: 1, Timeout: time.Second,
	})
}

// While Redis is down, each FailMode means what it means over HTTP:
// FailOpen serves, FailClosed is Unavailable with RetryInfo, FailLocal
// limits in process (ResourceExhausted). No degraded call carries
// rate-limit metadata.
func TestFailModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  core.FailMode
		codes []codes.Code
	}{
		{core.FailOpen, []codes.Code{codes.OK, codes.OK, codes.OK}},
		{core.FailClosed, []codes.Code{codes.Unavailable, codes.Unavailable}},
		{core.FailLocal, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			t.Cleanup(func() { client.Close() })
			s := serveBoth(t, both(redisLimiter(t, client, "grpc:", core.PerMinute(2), tc.mode)))
			if c := wantCodes(t, func() call { return s.check(t) }, codes.OK)[0]; c.get(t, "ratelimit-remaining") != "1" {
				t.Fatalf("Redis up: remaining %q, want 1", c.get(t, "ratelimit-remaining"))
			}
			m.Close()
			for i, c := range wantCodes(t, func() call { return s.check(t) }, tc.codes...) {
				if len(c.md.Get("ratelimit-limit")) != 0 || len(c.md.Get("ratelimit-remaining")) != 0 {
					t.Errorf("call %d: degraded decision sent metadata %v", i+1, c.md)
				}
				d, ok := c.retryDelay()
				if refused := c.code() != codes.OK; ok != refused || (refused && d <= 0) {
					t.Errorf("call %d (%v): RetryInfo %v (present %v)", i+1, c.code(), d, ok)
				}
				if c.code() == codes.Unavailable && c.st.Message()[:28] != "rate limiting is unavailable" {
					t.Errorf("call %d: message %q", i+1, c.st.Message())
				}
			}
		})
	}
}

// On a real Redis (skipped without one unless RATELIMIT_REQUIRE_REDIS=1),
// unary calls and streams share a key's one limit.
func TestRealRedis(t *testing.T) {
	t.Parallel()
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s := serveBoth(t, both(redisLimiter(t, client, prefix, core.PerMinute(3), core.FailClosed), ratelimit.WithHeaders(ratelimit.HeadersDraft06)))
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK)
	if _, md, st := watch(t, s, t.Context()); st.Code() != codes.OK || md.Get("ratelimit-remaining")[0] != "0" {
		t.Fatalf("stream: %v, remaining %q; want OK, 0", st, md.Get("ratelimit-remaining"))
	}
	c := wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)[0]
	if d, ok := c.retryDelay(); !ok || d <= 0 || d > 20*time.Second {
		t.Errorf("RetryInfo %v (present %v), want (0, 20s]", d, ok)
	}
}

// A call whose context is already cancelled when the interceptor decides
// (its client went away) is still decided and counted by the store, never
// degraded: DESIGN §2a.
func TestCancelledCallCounted(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	var obs observations
	lim := redisLimiter(t, client, "cancel:", core.PerMinute(2), core.FailOpen)
	goneAway := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return h(ctx, req)
	}
	s := serve(t, grpc.ChainUnaryInterceptor(goneAway, ratelimit.UnaryServerInterceptor(lim, obs.option())))
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK, codes.ResourceExhausted)
	for i, o := range obs.all() {
		if o.res.Degraded {
			t.Errorf("decision %d degraded: a cancelled call reached FailMode", i+1)
		}
	}
}
