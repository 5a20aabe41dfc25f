package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

type recorder struct {
	mu       sync.Mutex
	events   []core.DecisionEvent
	breakers []bool
}

func (r *recorder) Decision(e core.DecisionEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) BreakerChange(_ string, open bool) {
	r.mu.Lock()
	r.breakers = append(r.breakers, open)
	r.mu.Unlock()
}

func TestObserverSeesDecisions(t *testing.T) {
	rec := &recorder{}
	l := mustNew(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: "obs", Observer: rec})
	l.Allow(context.Background(), "k")
	l.Allow(context.Background(), "k")
	want := []core.DecisionEvent{{Policy: "obs", Allowed: true}, {Policy: "obs"}}
	if len(rec.events) != 2 || rec.events[0] != want[0] || rec.events[1] != want[1] {
		t.Fatalf("events %+v, want %+v", rec.events, want)
	}
}

func TestObserverSeesDegradationAndBreaker(t *testing.T) {
	rec := &recorder{}
	s := &failingStore{}
	l := mustNew(t, core.Config{Store: s, Limit: core.PerHour(1), FailMode: core.FailClosed, Observer: rec,
		BreakerFailures: 2, BreakerCooldown: time.Millisecond, Logger: discard})
	for i := 0; i < 3; i++ {
		l.Allow(context.Background(), "k")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 3 {
		t.Fatalf("%d events, want 3", len(rec.events))
	}
	for _, e := range rec.events {
		if !e.Degraded || e.Allowed || e.Err == nil {
			t.Errorf("event %+v, want degraded denial with a cause", e)
		}
	}
	if len(rec.breakers) != 1 || !rec.breakers[0] {
		t.Errorf("breaker changes %v, want [open]", rec.breakers)
	}
}
