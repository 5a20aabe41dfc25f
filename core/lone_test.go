package core_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// dialCounter counts the connections a client opens.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (*dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (*dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLoneCallsNearTimeoutKeepConnections: one caller at a time, Redis
// as far away as the Timeout. Its decisions time out, but their calls
// outlive them and keep their connection: go-redis closes one whose call
// outlived its context, so calls under the callers' own deadlines would
// each dial again (18 connections in this second). Both client
// settings; with ContextTimeoutEnabled the first call, sent on its
// caller's goroutine while calls were fast, costs its connection (and
// its replacement's dial).
func TestLoneCallsNearTimeoutKeepConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("a second of calls through a latency proxy")
	}
	for _, ctxTimeout := range []bool{true, false} {
		t.Run(map[bool]string{true: "context-timeouts", false: "default-client"}[ctxTimeout], func(t *testing.T) {
			p := faultproxy.Start(t, redistest.Addr(t))
			dials := &dialCounter{}
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: ctxTimeout})
			defer c.Close()
			c.AddHook(dials)
			const timeout = 50 * time.Millisecond
			l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))),
				Limit: core.PerSecond(1000), FailMode: core.FailOpen, Timeout: timeout, DenyCacheSize: -1,
				BreakerFailures: 1 << 20}) // every decision calls Redis
			ctx := context.Background()
			// A running app: fast calls, a connection open.
			waitFor(t, 5*time.Second, "a decision from Redis", func() bool {
				res, err := l.Allow(ctx, "warm")
				return err == nil && !res.Degraded
			})
			for range 20 {
				l.Allow(ctx, "warm")
			}
			before := dials.n.Load()
			p.SetLatency(timeout)
			var decisions, degraded int
			for start := time.Now(); time.Since(start) < time.Second; decisions++ {
				if res, _ := l.Allow(ctx, "k"); res.Degraded {
					degraded++
				}
			}
			n := dials.n.Load() - before
			t.Logf("Redis %v away, Timeout %v: %d lone decisions, %d degraded, %d connections opened", timeout, timeout, decisions, degraded, n)
			if n > 4 {
				t.Errorf("%d connections opened for %d lone decisions; want at most 4", n, decisions)
			}
		})
	}
}
