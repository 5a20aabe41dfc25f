package metrics_test

import (
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
)

// TestBorrowMetrics: decisions from slices, tokens lent and returned,
// labelled by the policy alone; a policy that never borrows has none.
func TestBorrowMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.Decision(core.DecisionEvent{Policy: "hot", Allowed: true, Borrowed: true, Lent: 100})
	for range 9 {
		m.Decision(core.DecisionEvent{Policy: "hot", Allowed: true, Borrowed: true})
	}
	m.Decision(core.DecisionEvent{Policy: "hot", Allowed: true, Borrowed: true, Lent: 100, Returned: 90})
	m.Decision(core.DecisionEvent{Policy: "cold", Allowed: true})
	for _, tt := range []struct {
		name      string
		got, want float64
	}{
		{"borrowed", value(t, m, "borrowed_decisions_total", "hot"), 11},
		{"lent", value(t, m, "lent_tokens_total", "hot"), 200},
		{"returned", value(t, m, "returned_tokens_total", "hot"), 90},
		{"allowed", value(t, m, "decisions_total", "hot", "allowed"), 11},
		{"cold borrowed", value(t, m, "borrowed_decisions_total", "cold"), -1}, // no series
	} {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
