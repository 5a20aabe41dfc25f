package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// appInstances returns n limiters of cfg as n app instances have them: each
// on a RedisStore with prefix over a client of its own, client(i), closed
// when the test ends.
func appInstances(t testing.TB, n int, prefix string, cfg core.Config, client func(i int) *redis.Client) []*core.Limiter {
	t.Helper()
	ls := make([]*core.Limiter, n)
	for i := range ls {
		c := client(i)
		t.Cleanup(func() { c.Close() })
		cfg := cfg
		cfg.Store = core.NewRedisStore(c, core.WithPrefix(prefix))
		ls[i] = limitertest.New(t, cfg)
	}
	return ls
}

// pooled returns appInstances' client function for a client of addr with a
// pool of size connections.
func pooled(addr string, size int) func(int) *redis.Client {
	return func(int) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr, PoolSize: size}) }
}

// startCluster starts a Redis Cluster of three primaries for t, and skips
// t under -short: a cluster takes seconds to form.
func startCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Redis Cluster: takes seconds")
	}
	return redistest.StartCluster(t, 3, 0)
}

// gauge counts the requests admitted, those in flight, and the most there
// were in flight at once.
type gauge struct{ admitted, now, peak atomic.Int64 }

// hold is an admitted request's handler: in flight for a millisecond.
func (g *gauge) hold() {
	g.admitted.Add(1)
	n := g.now.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	time.Sleep(time.Millisecond)
	g.now.Add(-1)
}

// checkExact fails the test unless every decision of c was the store's
// and the admitted count lies between lim's burst, which a full bucket
// always serves, and bound.
func checkExact(t testing.TB, c limitertest.Counts, lim core.Limit, bound int64) {
	t.Helper()
	if c.Degraded != 0 {
		t.Fatalf("%d degraded decisions against a healthy Redis", c.Degraded)
	}
	if c.Admitted > bound {
		t.Fatalf("admitted %d > bound %d: over-admission", c.Admitted, bound)
	}
	if c.Admitted < int64(lim.Capacity()) {
		t.Fatalf("admitted %d < burst %d: false denials", c.Admitted, lim.Capacity())
	}
}

// serve has c acquire key rounds times, each lease held (hold) and then
// released. An error fails the test, and so does a degraded acquire
// unless degradedOK.
func (g *gauge) serve(t testing.TB, c *core.Concurrency, key string, rounds int, degradedOK bool) {
	ctx := context.Background()
	for r := range rounds {
		l, res, err := c.Acquire(ctx, key)
		if err != nil || res.Degraded && !degradedOK {
			t.Errorf("round %d: %+v, %v", r, res, err)
			return
		}
		if l == nil {
			continue
		}
		g.hold()
		if err := l.Release(ctx); err != nil {
			t.Errorf("release: %v", err)
		}
	}
}
