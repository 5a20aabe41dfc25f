package core_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// learningInstance is one app instance of a FailLocal limiter that
// learns the instance count (Instances 0), with a client of its own on m.
func learningInstance(t *testing.T, m *miniredis.Miniredis, lim core.Limit, opts ...func(*core.Config)) *core.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	cfg := core.Config{Store: core.NewRedisStore(client), Name: "learned", Limit: lim, FailMode: core.FailLocal, Timeout: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return limitertest.New(t, cfg)
}

// admittedInOutage is how many of tries requests on key l admits while
// the store is down; each must be degraded.
func admittedInOutage(t *testing.T, l *core.Limiter, key string, tries int) int {
	t.Helper()
	admitted := 0
	for range tries {
		r, err := l.Allow(context.Background(), key)
		if err != nil || !r.Degraded {
			t.Fatalf("outage: %+v, %v; want a degraded decision", r, err)
		}
		if r.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestFailLocalLearnsInstances: with Instances 0, FailLocal divides the
// limit by the instances stamped in the store's live set, as last seen:
// 3 instances each admit a third of the burst during an outage, and
// after a scale to 6 each admits a sixth.
func TestFailLocalLearnsInstances(t *testing.T) {
	m := miniredis.RunT(t)
	lim := core.PerHour(600) // burst 600, a token per 6s: no refill within the test
	var fleet []*core.Limiter
	scale := func(to int) {
		for len(fleet) < to {
			fleet = append(fleet, learningInstance(t, m, lim))
		}
		// The first beats see fewer than are up, and an instance's
		// heartbeat waits for its breaker, opened by the last outage.
		for deadline := time.Now().Add(10 * time.Second); ; {
			learned := 0
			for _, l := range fleet {
				if core.Heartbeat(l) == to {
					learned++
				}
			}
			if learned == to {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d instances count %d instances", learned, to, to)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	outage := func(key string) []int {
		m.Close()
		defer func() {
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		}()
		var each []int
		for _, l := range fleet {
			each = append(each, admittedInOutage(t, l, key, lim.Burst))
		}
		return each
	}
	for _, phase := range []struct {
		instances int
		key       string
	}{{3, "before-scale"}, {6, "after-scale"}} {
		scale(phase.instances)
		each := outage(phase.key)
		total := 0
		for i, n := range each {
			if want := lim.Burst / phase.instances; n != want {
				t.Errorf("%d instances: instance %d admitted %d in the outage, want %d (burst %d / %d)", phase.instances, i, n, want, lim.Burst, phase.instances)
			}
			total += n
		}
		t.Logf("FailLocal outage, %d instances learned: each admitted %v, %d in all (limit's burst %d)", phase.instances, each, total, lim.Burst)
	}
}

// TestFailLocalCountRidesDecisions: the heartbeat needs no call of its
// own making: a decision that asks the store starts one when due, and
// the count a degraded decision uses is what the last one saw, in the
// Observer's events and the log line.
func TestFailLocalCountRidesDecisions(t *testing.T) {
	m := miniredis.RunT(t)
	rec := &recorder{}
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	a := learningInstance(t, m, core.PerMinute(60), func(c *core.Config) { c.Observer = rec; c.Logger = logger })
	b := learningInstance(t, m, core.PerMinute(60))
	core.Heartbeat(b)
	if got := core.Instances(a); got != 1 {
		t.Fatalf("before its first heartbeat an instance counts %d, want 1 (itself)", got)
	}
	if _, err := a.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); core.Instances(a) != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("a decision did not start the heartbeat: count %d, want 2", core.Instances(a))
		}
		time.Sleep(time.Millisecond)
	}
	m.Close()
	r, _ := a.Allow(context.Background(), "k")
	if !r.Degraded || r.Limit != (core.Limit{Rate: 60, Period: 2 * time.Minute, Burst: 30}) {
		t.Fatalf("degraded decision %+v: want the share of 2 instances", r)
	}
	rec.mu.Lock()
	e := rec.events[len(rec.events)-1]
	rec.mu.Unlock()
	if !e.Degraded || e.Instances != 2 {
		t.Errorf("last DecisionEvent %+v: want degraded, Instances 2", e)
	}
	mu.Lock()
	line := buf.String()
	mu.Unlock()
	if !strings.Contains(line, "instances=2") {
		t.Errorf("degraded log line %q does not give the count in use", line)
	}
}

// TestFailLocalCountForgetsStopped: an instance not stamped for 10s on
// the store's clock leaves the count; a static Instances never changes.
func TestFailLocalCountForgetsStopped(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	fleet := []*core.Limiter{learningInstance(t, m, core.PerMinute(60)), learningInstance(t, m, core.PerMinute(60)), learningInstance(t, m, core.PerMinute(60))}
	for _, l := range fleet {
		core.Heartbeat(l)
	}
	m.SetTime(now.Add(9 * time.Second))
	if got := core.Heartbeat(fleet[0]); got != 3 {
		t.Fatalf("after 9s: %d instances, want 3", got)
	}
	m.SetTime(now.Add(11 * time.Second))
	if got := core.Heartbeat(fleet[0]); got != 1 {
		t.Fatalf("after 11s without the other two's heartbeats: %d instances, want 1", got)
	}
	static := learningInstance(t, m, core.PerMinute(60), func(c *core.Config) { c.Instances = 4; c.Name = "static" })
	if got := core.Heartbeat(static); got != 4 {
		t.Fatalf("static Instances 4: heartbeat made it %d", got)
	}
	mem := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(60), FailMode: core.FailLocal})
	if got := core.Instances(mem); got != 1 {
		t.Fatalf("memory store: %d instances, want 1", got)
	}
}

// TestFailLocalCountRidesAllowAll: a limiter decided only through
// AllowAll learns the count as well.
func TestFailLocalCountRidesAllowAll(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store := core.NewRedisStore(client)
	a := limitertest.New(t, core.Config{Store: store, Name: "a", Limit: core.PerMinute(60), FailMode: core.FailLocal, Timeout: 2 * time.Second})
	b := limitertest.New(t, core.Config{Store: store, Name: "b", Limit: core.PerMinute(60), FailMode: core.FailOpen, Timeout: 2 * time.Second})
	core.Heartbeat(learningInstance(t, m, core.PerMinute(60), func(c *core.Config) { c.Name = "a" }))
	if _, _, err := core.AllowAll(context.Background(), core.Check{Limiter: a, Key: "k", N: 1}, core.Check{Limiter: b, Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); core.Instances(a) != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("AllowAll did not start the heartbeat: count %d, want 2", core.Instances(a))
		}
		time.Sleep(time.Millisecond)
	}
}
