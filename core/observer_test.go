package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
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
	t.Parallel()
	rec := &recorder{}
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen, Name: "obs", Observer: rec})
	l.Allow(context.Background(), "k")
	l.Allow(context.Background(), "k")
	want := []core.DecisionEvent{{Policy: "obs", Allowed: true}, {Policy: "obs"}}
	if len(rec.events) != 2 || rec.events[0] != want[0] || rec.events[1] != want[1] {
		t.Fatalf("events %+v, want %+v", rec.events, want)
	}
}

func TestObserverSeesDegradationAndBreaker(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := limitertest.NewDownStore()
	l := limitertest.New(t, core.Config{Store: s, Limit: core.PerHour(1), FailMode: core.FailClosed, Observer: rec,
		BreakerFailures: 2, BreakerCooldown: time.Millisecond})
	core.SetClock(l, func() time.Duration { return 0 }) // the breaker stays open
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

// TestObserverSkipsPeekAndRefund (issue 23, item 4): Peek and Refund
// decide nothing, so an Observer (metrics) sees only the takes, on every
// store alike.
func TestObserverSkipsPeekAndRefund(t *testing.T) {
	all := stores(t)
	for _, name := range []string{"memory", "miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			if name != "redis" {
				t.Parallel() // a store of its own
			}
			rec := &recorder{}
			l := limitertest.New(t, core.Config{Store: all[name](t).store, Limit: core.PerMinute(2), FailMode: core.FailOpen, Observer: rec, Timeout: time.Second})
			ctx := context.Background()
			for range 3 {
				l.Allow(ctx, "k")
			}
			for range 10 {
				l.Peek(ctx, "k", 1)
			}
			for range 5 {
				l.Refund(ctx, "k", 1)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.events) != 3 {
				t.Fatalf("%d decision events for 3 takes, 10 peeks and 5 refunds: %+v; want 3", len(rec.events), rec.events)
			}
		})
	}
}

// TestObserverDryRunRefusal (issue 23, item 4): a refusal decided under
// WithDryRun reaches the Observer marked DryRun, an allowed decision and a
// refusal without it never are.
func TestObserverDryRunRefusal(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Name: "dry", Limit: core.PerHour(1), FailMode: core.FailOpen, Observer: rec})
	dry := core.WithDryRun(context.Background())
	l.Allow(dry, "k")
	l.Allow(dry, "k")
	l.Allow(context.Background(), "k")
	want := []core.DecisionEvent{{Policy: "dry", Allowed: true}, {Policy: "dry", DryRun: true}, {Policy: "dry"}}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 3 || rec.events[0] != want[0] || rec.events[1] != want[1] || rec.events[2] != want[2] {
		t.Fatalf("events %+v, want %+v", rec.events, want)
	}
}
