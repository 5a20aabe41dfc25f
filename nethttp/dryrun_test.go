package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

type dryRunObserver struct {
	core.Observer
	mu     sync.Mutex
	events []core.DecisionEvent
}

func (o *dryRunObserver) Decision(e core.DecisionEvent) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}
func (o *dryRunObserver) BreakerChange(string, bool) {}

// TestDryRunRefusalObservedAsWouldDeny (issue 23, item 4): in dry-run
// mode a would-be refusal passes, and the limiter's Observer (the metrics
// package) sees it marked DryRun, so it is counted "would_deny", never
// "denied".
func TestDryRunRefusalObservedAsWouldDeny(t *testing.T) {
	t.Parallel()
	obs := &dryRunObserver{}
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(1), FailMode: core.FailOpen, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttp.Middleware(lim, nethttp.WithDryRun())(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d, want 200 in dry-run", i, w.Code)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.events) != 2 || obs.events[1].Allowed || !obs.events[1].DryRun {
		t.Fatalf("events %+v; want the second a refusal marked DryRun", obs.events)
	}
}
