package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestColdPoolFloodDecidedExactly (issue 44; DESIGN §4 "a cold start is
// not an outage", §2a): the own flood of TestOwnFloodDecidedExactly —
// Redis 30 ms away, 64 goroutines on one key, FailOpen — meeting a pool
// with one connection open (a deploy, a scale-up mid-flood; PoolSize 32,
// MinIdleConns 0). A new connection here costs 2 s before its first
// reply (a slow dial: a SYN retransmitted, a TLS handshake far away), a
// call on an open one 30 ms, and Timeout is 1 s (a margin for -race on a
// loaded machine): Redis answers in time, a decision that waits for a new
// connection does not. No decision
// may be degraded, and FailOpen admits at most C + R·Δ. Before: every
// carrier beyond the open connection took requests and then dialed:
// 123–189 of 800–1 300 decisions degraded, 242–255 admitted against a
// bound of 127.
func TestColdPoolFloodDecidedExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1.5 s flood through a latency proxy")
	}
	srv := redistest.StartServer(t) // see TestOwnFloodDecidedExactly
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
	defer c.Close()
	store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	ctx := context.Background()
	if err := store.Preload(ctx); err != nil { // the one connection open
		t.Fatal(err)
	}
	if n := c.PoolStats().TotalConns; n != 1 {
		t.Fatalf("%d connections open before the flood, want 1", n)
	}
	p.SetLatency(30 * time.Millisecond)
	p.SetDialLatency(2 * time.Second)
	limit := core.PerSecond(50)
	l := limitertest.New(t, core.Config{Store: store, Limit: limit, FailMode: core.FailOpen, Timeout: time.Second})
	f := floodKey(t, l, srv.Addr(), limit, "attacker", nil)
	t.Logf("cold pool flood at +30ms, dial 2s: admitted %d (bound C + R·Δ = %d, Δ %v on the Redis clock), %d of %d decisions degraded; %d connections open after",
		f.admitted, f.bound, f.delta.Round(time.Millisecond), f.degraded, f.decisions, c.PoolStats().TotalConns)
	if f.admitted > f.bound {
		t.Errorf("admitted %d, bound C + R·Δ = %d", f.admitted, f.bound)
	}
	if f.degraded > 0 {
		t.Errorf("%d of %d decisions degraded while Redis answered in 30 ms", f.degraded, f.decisions)
	}
}
