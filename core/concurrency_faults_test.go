package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestConcurrencyLostLeases: a Redis that forgets its leases (a restart
// without persistence, or a failover to a replica that had not received
// them) lets Max more requests in while the first holders still run;
// their renewals find their leases gone and never bring them back, so
// the excess ends when those requests do.
func TestConcurrencyLostLeases(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	const max = 3
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "lost", Max: max, Lease: time.Minute, Timeout: time.Second})
	var first []*core.Lease
	for range max {
		l, _ := acquire(t, c, "k", true)
		l.KeepAlive()
		first = append(first, l)
	}
	acquire(t, c, "k", false)
	srv.Kill()
	srv.Restart() // empty: the leases are gone
	admitted := 0
	for range 2 * max {
		if l, res, _ := c.Acquire(context.Background(), "k"); l != nil {
			admitted++
		} else if res.Degraded {
			t.Fatalf("degraded after the restart: %+v", res)
		}
	}
	if admitted != max {
		t.Fatalf("%d admitted after the leases were lost, want %d (Max more)", admitted, max)
	}
	core.RenewNow(c)
	if got := core.Kept(c); got != 0 {
		t.Fatalf("%d leases still renewed after their renewal found them gone, want 0", got)
	}
	for _, l := range first {
		_ = l.Release(context.Background())
	}
	t.Logf("leases lost with Redis's data: %d more admitted (Max %d), %d in flight at once until the first holders finished; their renewals brought nothing back", admitted, max, admitted+max)
}

// TestConcurrencyClockSteps: the Redis server's clock stepping forward
// by s ends every lease s early (a step of a Lease or more frees every
// slot at once: up to Max more in flight); stepping back by s makes
// leases last s longer, admitting nothing more.
func TestConcurrencyClockSteps(t *testing.T) {
	t.Parallel()
	const max, lease = 2, 30 * time.Second
	tests := []struct {
		name     string
		step     time.Duration
		admitted int // extra acquires granted right after the step
	}{
		{"forward a Lease", lease, max},
		{"forward half a Lease", lease / 2, 0},
		{"back an hour", -time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			now := time.Unix(1_700_000_000, 0)
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "step", Max: max, Lease: lease})
			for range max {
				acquire(t, c, "k", true)
			}
			now = now.Add(tt.step)
			m.SetTime(now)
			admitted := 0
			for range 2 * max {
				if l, _, _ := c.Acquire(context.Background(), "k"); l != nil {
					admitted++
				}
			}
			if admitted != tt.admitted {
				t.Fatalf("step %v: %d more admitted, want %d", tt.step, admitted, tt.admitted)
			}
			if tt.step < 0 {
				// The leases now end a Lease + |step| from the server's
				// new now: a refusal says so, and nothing is freed early.
				_, res, _ := c.Acquire(context.Background(), "k")
				if want := lease - tt.step; res.RetryAfter != want {
					t.Fatalf("after stepping back %v: RetryAfter %v, want %v", -tt.step, res.RetryAfter, want)
				}
			}
			t.Logf("Redis clock stepped %v with %d of %d slots held (Lease %v): %d more admitted", tt.step, max, max, lease, admitted)
		})
	}
}
