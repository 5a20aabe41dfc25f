package core

import (
	"testing"
	"time"
)

// TestDenyCacheSkipsLateDeadlines: an answer that arrives after the
// deadline it gives (Redis 30 ms away, a token every 20 ms) caches
// nothing, so the next callers ask the store at once, each in one round
// trip, instead of one probing and the others waiting for it and then
// asking anyway (two round trips: over a 50 ms Timeout at 30 ms). An
// answer that arrives in time is cached as before.
func TestDenyCacheSkipsLateDeadlines(t *testing.T) {
	lim := PerSecond(50)
	denied := Result{Limit: lim, RetryAfter: 20 * time.Millisecond, ResetAfter: 20 * time.Millisecond}
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name    string
		arrival int64 // after sending
		want    []int // the next two callers' lookups
	}{
		{"late", 30 * ms, []int{cacheMiss, cacheMiss}},
		{"in time", 1 * ms, []int{cacheDeny, cacheDeny}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDenyCache(64)
			const sent = 1000 * int64(time.Second)
			if _, _, state := c.lookup("k", 1, lim, sent); state != cacheMiss {
				t.Fatalf("first lookup: %d, want a miss", state)
			}
			now := sent + tc.arrival
			c.record("k", 1, lim, sent, now, denied, false)
			for i, want := range tc.want {
				if _, _, got := c.lookup("k", 1, lim, now); got != want {
					t.Errorf("caller %d after the answer: lookup %d, want %d", i+1, got, want)
				}
			}
		})
	}
}
