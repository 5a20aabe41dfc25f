package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
)

// TestLeaseMetrics: an in-flight limit's slots held, refusals, expiries
// and renewals, labelled by its Name alone.
func TestLeaseMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	store := core.NewMemoryStore(core.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "exports", Max: 2, Lease: 30 * time.Second, FailMode: core.FailClosed, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _, _ := c.Acquire(ctx, "client-secret-key")
	b, _, _ := c.Acquire(ctx, "client-secret-key")
	if l, _, _ := c.Acquire(ctx, "client-secret-key"); l != nil {
		t.Fatal("a third slot of 2")
	}
	if got := value(t, m, "inflight_held", "exports"); got != 2 {
		t.Fatalf("held: %v, want 2", got)
	}
	_ = a.Release(ctx)
	_ = a.Release(ctx) // counted once
	// b's holder dies: its lease ends, and the next acquire prunes it.
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	if l, _, _ := c.Acquire(ctx, "client-secret-key"); l == nil {
		t.Fatal("no slot after the leases ended")
	}
	m.Leases(core.LeaseEvent{Policy: "exports", Renewed: 3})
	tests := []struct {
		name      string
		got, want float64
	}{
		{"held: 2 acquired, 1 released, 1 acquired", value(t, m, "inflight_held", "exports"), 2},
		{"refusals", value(t, m, "decisions_total", "exports", "denied"), 1},
		{"granted", value(t, m, "decisions_total", "exports", "allowed"), 3},
		{"expiries", value(t, m, "lease_expiries_total", "exports"), 1},
		{"renewals", value(t, m, "lease_renewals_total", "exports"), 3},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	_ = b.Release(ctx)
}
