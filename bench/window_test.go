package bench

import (
	"testing"
	"time"
)

// TestWorstWindow: a schedule the bucket allows has no window over its
// bound; one that keeps C + R·Δ over the whole run but crams a burst the
// bucket had not refilled into a millisecond is caught there.
func TestWorstWindow(t *testing.T) {
	lim := Limit{Rate: 10, Period: time.Second, Burst: 10}
	at := func(d time.Duration) stamp { return stamp{d, d + time.Millisecond} }
	var kept, crammed []stamp
	for range 10 { // the burst, at once
		kept = append(kept, at(0))
		crammed = append(crammed, at(0))
	}
	for i := 1; i <= 50; i++ { // then the refill, one token each 100 ms
		kept = append(kept, at(time.Duration(i)*100*time.Millisecond))
		crammed = append(crammed, at(5*time.Second)) // all 50 at 5 s
	}
	for _, tc := range []struct {
		name      string
		adm       []stamp
		wantOver  int64
		wantSpan0 bool // the whole run's own bound is kept
	}{
		{"paced as the bucket refills", kept, 0, true},
		{"refill taken at once at 5 s", crammed, 50 - 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			span := tc.adm[len(tc.adm)-1].answered
			if got := int64(len(tc.adm)) - int64(lim.Bound(span)); (got <= 0) != tc.wantSpan0 {
				t.Fatalf("whole run: %d over its bound; the case wants it kept: %v", got, tc.wantSpan0)
			}
			over, windows := worstWindow(tc.adm, lim)
			if over != tc.wantOver {
				t.Errorf("worst window: %d over; want %d", over, tc.wantOver)
			}
			if windows == 0 {
				t.Error("no window checked")
			}
		})
	}
	if over, windows := worstWindow(nil, lim); over != 0 || windows != 0 {
		t.Errorf("no admissions: %d over in %d windows; want 0 in 0", over, windows)
	}
}
