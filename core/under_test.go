package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/policyname"
)

// namesObserver records the policy names of the decisions it sees.
type namesObserver struct {
	mu    sync.Mutex
	names map[string]int
}

func (o *namesObserver) Decision(e core.DecisionEvent) {
	o.mu.Lock()
	o.names[e.Policy]++
	o.mu.Unlock()
}

func (o *namesObserver) BreakerChange(string, bool) {}

// TestUnderNamesOwnBuckets: views of one limiter under two policy names
// decide two buckets of one key, each under its own limit; a denial the
// first's store answered (cached by the limiter's one denial cache) never
// answers for the second, by AllowN or in an AllowAll; the Observer hears
// each view's name.
func TestUnderNamesOwnBuckets(t *testing.T) {
	all := stores(t)
	for _, name := range []string{"memory", "miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			if name != "redis" {
				t.Parallel()
			}
			cs := all[name](t)
			obs := &namesObserver{names: map[string]int{}}
			l := limitertest.New(t, core.Config{Store: cs.store, Name: "base", Limit: core.PerMinute(1),
				FailMode: core.FailClosed, Timeout: 5 * time.Second, Observer: obs})
			lim := core.PerMinute(2)
			a, err := l.Under(policyname.Of("rule-a"), lim)
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.Under(policyname.Of("rule-b"), lim)
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := l.Under(policyname.Of("rule-a"), lim); again != a {
				t.Fatal("Under made a second view of one name and limit")
			}
			ctx := context.Background()
			for i := range 4 { // the last two denied: a cached denial for the last
				r, err := a.Allow(ctx, "k")
				if err != nil || r.Allowed != (i < 2) || r.Name != "rule-a" || r.Limit != lim {
					t.Fatalf("rule-a request %d: %+v %v", i+1, r, err)
				}
			}
			if r, err := b.Allow(ctx, "k"); err != nil || !r.Allowed || r.Name != "rule-b" || r.Remaining != 1 {
				t.Fatalf("rule-b after rule-a's denial: %+v %v; want allowed, 1 remaining", r, err)
			}
			_, res, err := core.AllowAll(ctx, core.Check{Limiter: b, Key: "k", N: 1}, core.Check{Limiter: l, Key: "k", N: 1})
			if err != nil || !res[0].Allowed || !res[1].Allowed || res[0].Name != "rule-b" || res[1].Name != "base" {
				t.Fatalf("AllowAll of rule-b and base: %+v %v", res, err)
			}
			if r, _ := b.Allow(ctx, "k"); r.Allowed {
				t.Fatalf("rule-b's third: %+v; want refused (burst 2)", r)
			}
			if r, _ := a.Peek(ctx, "k", 1); r.Allowed {
				t.Fatalf("rule-a: %+v; want still empty", r)
			}
			if err := a.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if r, _ := b.Peek(ctx, "k", 1); r.Allowed {
				t.Fatalf("rule-b after rule-a's reset: %+v; want still empty", r)
			}
			if r, _ := a.Peek(ctx, "k", 2); !r.Allowed {
				t.Fatalf("rule-a after its reset: %+v; want full", r)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.names["rule-a"] != 4 || obs.names["rule-b"] != 3 || obs.names["base"] != 1 {
				t.Fatalf("observed %v; want rule-a 4, rule-b 3, base 1", obs.names)
			}
		})
	}
}

// TestUnderRefuses: a name New would refuse, an Extra limit's name, and a
// limit New would refuse are errors; the limiter's own name is With.
func TestUnderRefuses(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Name: "base", Limit: core.PerMinute(1),
		Extra: []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(10)}}, FailMode: core.FailOpen})
	for _, n := range []string{"", "has space", "hourly", "a{b}"} {
		if _, err := l.Under(policyname.Of(n), core.PerMinute(2)); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("Under(%q): %v; want ErrInvalidConfig", n, err)
		}
	}
	if _, err := l.Under(policyname.Of("rule"), core.Limit{Rate: 1}); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("Under with a zero Period: %v; want ErrInvalidLimit", err)
	}
	if v, err := l.Under(policyname.Of("base"), core.PerMinute(1)); err != nil || v != l {
		t.Errorf("Under(its own name and limit) = %p, %v; want l itself", v, err)
	}
}
