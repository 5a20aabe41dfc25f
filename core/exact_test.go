package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestExactnessAcrossInstances: 16 limiters, each with its own client (16
// app instances), race thousands of decisions on one key. However they
// interleave, the admitted cost never exceeds C + R·Δ.
func TestExactnessAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("real-Redis load test")
	}
	// Every decision through the script, then with the local denial cache.
	for _, cache := range []int{-1, 0} {
		t.Run(map[int]string{-1: "script-only", 0: "denial-cache"}[cache], func(t *testing.T) {
			exactness(t, cache)
		})
	}
}

func exactness(t *testing.T, denyCache int) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	const (
		instances = 16
		perInst   = 250
	)
	lim := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
	var admitted, denied atomic.Int64
	limiters := make([]*core.Limiter, instances)
	for i := range limiters {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8})
		t.Cleanup(func() { c.Close() })
		limiters[i] = limitertest.New(t, core.Config{
			Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: lim,
			FailMode: core.FailClosed, Timeout: 2 * time.Second, DenyCacheSize: denyCache,
		})
	}
	var degraded atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range limiters {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perInst/4; i++ {
					res, err := l.Allow(context.Background(), "hot")
					switch {
					case err != nil:
						t.Error(err)
						return
					case res.Degraded:
						degraded.Add(1)
					case res.Allowed:
						admitted.Add(1)
					default:
						denied.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := int64(lim.Capacity()) + int64(float64(lim.Rate)*elapsed.Seconds()/lim.Period.Seconds()) + 1
	t.Logf("%d instances, %d decisions in %v: admitted %d, denied %d, degraded %d; bound C + R·Δ = %d",
		instances, instances*perInst, elapsed.Round(time.Millisecond), admitted.Load(), denied.Load(), degraded.Load(), bound)
	if degraded.Load() != 0 {
		t.Fatalf("%d degraded decisions against a healthy Redis", degraded.Load())
	}
	if admitted.Load() > bound {
		t.Fatalf("admitted %d > bound %d: over-admission", admitted.Load(), bound)
	}
	if admitted.Load() < int64(lim.Capacity()) {
		t.Fatalf("admitted %d < burst %d: false denials", admitted.Load(), lim.Capacity())
	}
}

// TestNoFalseDenials: a bucket that is never exhausted never denies, however
// many instances share it.
func TestNoFalseDenials(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	const instances, each = 16, 50
	var wg sync.WaitGroup
	var denied atomic.Int64
	for i := 0; i < instances; i++ {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4})
		t.Cleanup(func() { c.Close() })
		l := limitertest.New(t, core.Config{
			Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: core.PerHour(instances * each),
			FailMode: core.FailClosed, Timeout: 2 * time.Second,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if res, _ := l.Allow(context.Background(), "k"); !res.Allowed {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if denied.Load() != 0 {
		t.Fatalf("%d of %d decisions denied within the burst", denied.Load(), instances*each)
	}
}
