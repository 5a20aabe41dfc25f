package core_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

func TestMemorySweepsFullBuckets(t *testing.T) {
	t.Parallel()
	c := limitertest.NewClock()
	s := core.NewMemoryStore(core.WithClock(c.Now), core.WithSweepInterval(time.Minute))
	p := []core.Policy{policyOf(t, "p", core.PerSecond(1))}
	for i := 0; i < 1000; i++ {
		s.Take(context.Background(), strconv.Itoa(i), 1, p, nil)
	}
	if got := s.Len(); got != 1000 {
		t.Fatalf("Len = %d, want 1000", got)
	}
	c.Advance(2 * time.Minute)
	// Sweeps run as shards are used: touch every shard.
	for i := 0; i < 1000; i++ {
		s.Take(context.Background(), "new"+strconv.Itoa(i), 1, p, nil)
	}
	if got := s.Len(); got > 1000 {
		t.Fatalf("after the old buckets refilled and a sweep: Len = %d, want ≤ 1000 (the new ones)", got)
	}
}

func TestMemoryKeyCap(t *testing.T) {
	t.Parallel()
	c := limitertest.NewClock()
	const maxKeys = 1024
	s := core.NewMemoryStore(core.WithClock(c.Now), core.WithMaxKeys(maxKeys))
	p := []core.Policy{policyOf(t, "p", core.PerHour(1))}
	for i := 0; i < 100*maxKeys; i++ {
		s.Take(context.Background(), "attacker-"+strconv.Itoa(i), 1, p, nil)
	}
	if got := s.Len(); got > maxKeys {
		t.Fatalf("Len = %d after 100× the cap in unique keys, want ≤ %d", got, maxKeys)
	}
	// A known key keeps being limited exactly while the flood goes on.
	if o, _ := s.Take(context.Background(), "victim", 1, p, nil); !o.Allowed {
		t.Fatal("victim's first request denied")
	}
	if o, _ := s.Take(context.Background(), "victim", 1, p, nil); o.Allowed {
		t.Fatal("victim's second request allowed: the bucket was lost")
	}
}

func TestMemoryConcurrentExact(t *testing.T) {
	t.Parallel()
	s := core.NewMemoryStore()
	p := []core.Policy{policyOf(t, "p", core.PerHour(1000))}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; i < 500; i++ {
				if o, _ := s.Take(context.Background(), "k", 1, p, nil); o.Allowed {
					n++
				}
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	// 8000 tries in well under a second: refill adds at most a token or two.
	if allowed < 1000 || allowed > 1002 {
		t.Fatalf("allowed %d of 8000 on a 1000-per-hour bucket, want 1000 (+ refill)", allowed)
	}
}

func TestMemoryClockBackwards(t *testing.T) {
	t.Parallel()
	c := limitertest.NewClock()
	s := core.NewMemoryStore(core.WithClock(c.Now))
	p := []core.Policy{policyOf(t, "p", core.PerSecond(1))}
	s.Take(context.Background(), "k", 1, p, nil)
	c.Advance(-time.Hour)
	if o, _ := s.Take(context.Background(), "k", 1, p, nil); o.Allowed {
		t.Fatal("a clock moved back must not refill the bucket")
	}
}

func TestMemoryDecisionAllocs(t *testing.T) {
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1 << 20), FailMode: core.FailOpen})
	ctx := context.Background()
	l.Allow(ctx, "k")
	if n := testing.AllocsPerRun(1000, func() { l.Allow(ctx, "k") }); n != 0 {
		t.Fatalf("memory decision: %v allocs/op, want 0", n)
	}
}

func TestLimiterReset(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailOpen})
	ctx := context.Background()
	l.Allow(ctx, "k")
	if res, _ := l.Allow(ctx, "k"); res.Allowed {
		t.Fatal("second request allowed")
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Allow(ctx, "k"); !res.Allowed {
		t.Fatal("after Reset: denied")
	}
}

// TestMemoryManyPoliciesOneSubject: limiters sharing a store keep one
// bucket each for the same subject, whatever order they decide in.
func TestMemoryManyPoliciesOneSubject(t *testing.T) {
	t.Parallel()
	s := core.NewMemoryStore()
	ps := make([][]core.Policy, 40)
	for i := range ps {
		ps[i] = []core.Policy{policyOf(t, "p"+strconv.Itoa(i), core.PerHour(3))}
	}
	ctx := context.Background()
	for round := 0; round < 4; round++ {
		for i := range ps {
			o, err := s.Take(ctx, "k", 1, ps[(i*7+round)%len(ps)], nil)
			if wantAllowed := round < 3; err != nil || o.Allowed != wantAllowed || (wantAllowed && o.Remaining != int64(2-round)) {
				t.Fatalf("round %d, policy %d: got %+v %v", round, i, o, err)
			}
		}
	}
	if got := s.Len(); got != len(ps) {
		t.Fatalf("Len = %d, want %d", got, len(ps))
	}
}

// TestMemoryClockStepsNeverFreeze steps an injected clock back and forth
// (an hour, ten seconds, a second, 100 ms) while one subject asks every
// 10 ms of real time: no refusal lasts past the RetryAfter it announced
// plus 1 s unless the clock steps again meanwhile, and over the run at
// most one burst per step is admitted above the bound.
func TestMemoryClockStepsNeverFreeze(t *testing.T) {
	t.Parallel()
	one, err := core.Policies(core.NamedLimit{Name: "p", Limit: core.PerSecond(5).WithBurst(10)})
	if err != nil {
		t.Fatal(err)
	}
	two, err := core.Policies(core.NamedLimit{Name: "p", Limit: core.PerSecond(5).WithBurst(10)}, core.NamedLimit{Name: "m", Limit: core.PerMinute(600)})
	if err != nil {
		t.Fatal(err)
	}
	steps := []time.Duration{time.Hour, 10 * time.Second, time.Second, 100 * time.Millisecond}
	for name, ps := range map[string][]core.Policy{"one policy": one, "two policies": two} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			c := limitertest.NewClock()
			s := core.NewMemoryStore(core.WithClock(c.Now))
			const tick = 10 * time.Millisecond
			var real time.Duration
			admitted, stepped := 0, 0
			// Refusals since the last step or admission must end by then.
			deadline := time.Duration(-1)
			for i := 0; i < 30000; i++ {
				real += tick
				c.Advance(tick)
				if rng.IntN(400) == 0 {
					d := steps[rng.IntN(len(steps))]
					if rng.IntN(2) == 0 {
						d = -d
					}
					c.Advance(d)
					stepped++
					deadline = -1
				}
				o, err := s.Take(context.Background(), "k", 1, ps, nil)
				if err != nil {
					t.Fatal(err)
				}
				if o.Allowed {
					admitted++
					deadline = -1
					continue
				}
				if deadline >= 0 && real > deadline {
					t.Fatalf("at %v: still refused past %v (a RetryAfter announced + 1 s), with no clock step since", real, deadline)
				}
				if d := real + o.RetryAfter + time.Second; deadline < 0 || d < deadline {
					deadline = d
				}
			}
			// 5 a second, a burst of 10, plus a burst per step.
			if bound := 10 + int(real/(200*time.Millisecond)) + 10*stepped; admitted > bound {
				t.Fatalf("%d admitted over %v with %d clock steps, bound %d", admitted, real, stepped, bound)
			}
			if admitted < int(real/(200*time.Millisecond))/2 {
				t.Fatalf("%d admitted over %v with %d clock steps: frozen", admitted, real, stepped)
			}
		})
	}
}

// TestMemoryDigestKeyOwnBucket: a Limiter on the memory store keeps a long
// key under its digest ("~" and hex); a short key that spells that digest
// is another key and gets a bucket of its own (issue 23, item 7).
func TestMemoryDigestKeyOwnBucket(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 100)
	sum := sha256.Sum256([]byte(long))
	digest := "~" + hex.EncodeToString(sum[:16])
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerHour(1), FailMode: core.FailClosed})
	ctx := context.Background()
	for i, c := range []struct {
		key   string
		allow bool
	}{{long, true}, {digest, true}, {digest, false}, {long, false}, {"~", true}, {"~", false}} {
		r, err := l.Allow(ctx, c.key)
		if err != nil || r.Allowed != c.allow {
			t.Fatalf("request %d (%.10q…): allowed %v, %v; want %v", i, c.key, r.Allowed, err, c.allow)
		}
	}
}
