package bench

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/ratelimit/core"
)

// TestCauseObserverAllocs: the observer every ratelimit instance here
// carries allocates nothing for a decision the store made, so that the
// allocations per decision reported are ratelimit's own.
func TestCauseObserverAllocs(t *testing.T) {
	var cause atomic.Pointer[error]
	var borrowed atomic.Int64
	o := core.Observer(causeObserver{cause: &cause, borrowed: &borrowed})
	e := core.DecisionEvent{Allowed: true, Borrowed: true}
	if got := testing.AllocsPerRun(100, func() { o.Decision(e) }); got != 0 {
		t.Errorf("Decision allocates %v times per event; want 0", got)
	}
	o.Decision(core.DecisionEvent{Degraded: true, Err: errors.New("down")})
	if p := cause.Load(); p == nil || (*p).Error() != "down" {
		t.Errorf("cause %v; want the degraded decision's error", p)
	}
	if got := borrowed.Load(); got < 100 {
		t.Errorf("%d decisions counted from slices; want at least 100", got)
	}
}
