package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
)

// TestWaitMetrics: bookings by outcome, the delay booked, tokens charged
// and forgiven, labelled by the policy alone.
func TestWaitMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(10), Name: "upstream", FailMode: core.FailClosed, MaxWait: time.Second, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.ReserveN(ctx, "client-secret-key", 10) // now
	l.ReserveN(ctx, "client-secret-key", 5)  // 500 ms ahead
	l.ReserveN(ctx, "client-secret-key", 10) // 1.5 s: refused
	l.Charge(ctx, "client-secret-key", 20)   // would owe 25 of at most 10
	tests := []struct {
		name      string
		got, want float64
	}{
		{"booked", value(t, m, "waits_total", "upstream", "booked"), 2},
		{"refused", value(t, m, "waits_total", "upstream", "refused"), 1},
		{"charged", value(t, m, "charged_tokens_total", "upstream"), 20},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := value(t, m, "wait_seconds_total", "upstream"); got < 0.49 || got > 0.5 {
		t.Errorf("delay booked: %vs, want about 0.5s", got)
	}
	if got := value(t, m, "forgiven_tokens_total", "upstream"); got < 14 || got > 15 {
		t.Errorf("forgiven: %v, want about 15", got)
	}
}
