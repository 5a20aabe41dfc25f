package core_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
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
// its replacement's dial). A decision that finds every connection busy
// has connections opened ahead, and they stay open: at most 8 in all.
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
			if n > 8 {
				t.Errorf("%d connections opened for %d lone decisions; want at most 8", n, decisions)
			}
		})
	}
}

// deadlineHook records, for each script call, how long its context had
// left when it was sent.
type deadlineHook struct {
	mu   sync.Mutex
	left []time.Duration
}

func (*deadlineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d, ok := ctx.Deadline(); ok && strings.HasPrefix(cmd.Name(), "eval") {
			h.mu.Lock()
			h.left = append(h.left, time.Until(d))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (*deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLoneClusterDecisionsGoInline: on a Redis Cluster whose client has
// ContextTimeoutEnabled, a lone caller's decisions are sent on its own
// goroutine under its own deadline (Timeout), as on one Redis, not by a
// carrier under a call's longer one.
func TestLoneClusterDecisionsGoInline(t *testing.T) {
	opts := startCluster(t).Options()
	opts.ContextTimeoutEnabled = true
	c := redis.NewClusterClient(opts)
	defer c.Close()
	hook := &deadlineHook{}
	c.AddHook(hook)
	const timeout = 500 * time.Millisecond
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(1000),
		FailMode: core.FailClosed, Timeout: timeout, DenyCacheSize: -1})
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a decision from Redis", func() bool {
		res, err := l.Allow(ctx, "warm")
		return err == nil && !res.Degraded
	})
	hook.mu.Lock()
	hook.left = nil
	hook.mu.Unlock()
	for i := range 50 {
		if res, err := l.Allow(ctx, "k"+strconv.Itoa(i)); err != nil || res.Degraded || !res.Allowed {
			t.Fatalf("decision %d: %+v, %v", i, res, err)
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	inline := 0
	for _, left := range hook.left {
		if left <= timeout {
			inline++
		}
	}
	if len(hook.left) < 50 || inline < 45 {
		t.Errorf("%d of %d script calls sent under the caller's Timeout (%v); want at least 45 of 50", inline, len(hook.left), timeout)
	}
}

// TestLoneSlowShardKeepsConnections: a Ring of a fast shard and one as
// far away as the Timeout, one caller at a time asking each in turn. The
// slow shard's decisions go by carrier once its first call was slow, so
// they keep their connection, while the fast shard's go on their
// caller's goroutine: each node's calls are timed apart.
func TestLoneSlowShardKeepsConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two redis-server processes and a latency proxy")
	}
	p := faultproxy.Start(t, redistest.StartServer(t).Addr())
	fast := redistest.StartServer(t).Addr()
	var slowDials atomic.Int64
	hook := &deadlineHook{}
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"fast": fast, "slow": p.Addr()},
		ContextTimeoutEnabled: true,
		NewClient: func(o *redis.Options) *redis.Client {
			if o.Addr == p.Addr() {
				dial := o.Dialer
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					slowDials.Add(1)
					if dial != nil {
						return dial(ctx, network, addr)
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			}
			c := redis.NewClient(o)
			if o.Addr == fast {
				c.AddHook(hook)
			}
			return c
		},
	})
	defer ring.Close()
	subjOn := func(addr string) string {
		for i := 0; ; i++ {
			s := "s" + strconv.Itoa(i)
			if c, err := ring.GetShardClientForKey("{" + s + "}"); err == nil && c.Options().Addr == addr {
				return s
			}
		}
	}
	onFast, onSlow := subjOn(fast), subjOn(p.Addr())
	const timeout = 50 * time.Millisecond
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(ring, core.WithPrefix(redistest.Prefix(t))),
		Limit: core.PerSecond(1000), FailMode: core.FailOpen, Timeout: timeout, DenyCacheSize: -1,
		BreakerFailures: 1 << 20}) // every decision calls Redis
	ctx := context.Background()
	for _, s := range []string{onFast, onSlow} {
		waitFor(t, 5*time.Second, "a decision from Redis", func() bool {
			res, err := l.Allow(ctx, s)
			return err == nil && !res.Degraded
		})
	}
	for range 20 {
		l.Allow(ctx, onFast)
		l.Allow(ctx, onSlow)
	}
	before := slowDials.Load()
	p.SetLatency(timeout)
	hook.mu.Lock()
	hook.left = nil
	hook.mu.Unlock()
	var decisions, fastDegraded int
	for start := time.Now(); time.Since(start) < 2*time.Second; decisions += 2 {
		if res, _ := l.Allow(ctx, onFast); res.Degraded {
			fastDegraded++
		}
		l.Allow(ctx, onSlow)
	}
	n := slowDials.Load() - before
	hook.mu.Lock()
	inline := 0
	for _, left := range hook.left {
		if left <= timeout {
			inline++
		}
	}
	calls := len(hook.left)
	hook.mu.Unlock()
	t.Logf("%d lone decisions: slow shard %d connections opened; fast shard %d degraded, %d of %d calls inline",
		decisions, n, fastDegraded, inline, calls)
	if n > 5 {
		t.Errorf("slow shard: %d connections opened; want at most 5", n)
	}
	if fastDegraded > 0 {
		t.Errorf("fast shard: %d decisions degraded; want 0", fastDegraded)
	}
}
