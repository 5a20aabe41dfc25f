package core_test

import (
	"testing"
	"time"

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
	const instances, perInst = 16, 250
	lim := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
	ls := appInstances(t, instances, redistest.Prefix(t), core.Config{
		Limit: lim, FailMode: core.FailClosed, Timeout: 2 * time.Second, DenyCacheSize: denyCache,
	}, pooled(redistest.Addr(t), 8))
	c := limitertest.Flood{Key: "hot", Goroutines: 4, Each: perInst / 4}.Run(t, ls...)
	bound := limitertest.Bound(lim, c.Elapsed) + 1
	t.Logf("%d instances, %d decisions in %v: admitted %d, denied %d, degraded %d; bound C + R·Δ = %d",
		instances, instances*perInst, c.Elapsed.Round(time.Millisecond), c.Admitted, c.Denied, c.Degraded, bound)
	checkExact(t, c, lim, bound)
}

// TestNoFalseDenials: a bucket that is never exhausted never denies, however
// many instances share it.
func TestNoFalseDenials(t *testing.T) {
	const instances, each = 16, 50
	ls := appInstances(t, instances, redistest.Prefix(t), core.Config{
		Limit: core.PerHour(instances * each), FailMode: core.FailClosed, Timeout: 2 * time.Second,
	}, pooled(redistest.Addr(t), 4))
	if c := (limitertest.Flood{Key: "k", Goroutines: 1, Each: each}).Run(t, ls...); c.Denied != 0 {
		t.Fatalf("%d of %d decisions denied within the burst", c.Denied, instances*each)
	}
}
