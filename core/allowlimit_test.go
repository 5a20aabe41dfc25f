package core_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestAllowLimitThreeTenants: one limiter, three tenants each with its own
// quota read per request; each gets exactly its burst, reported as its
// limit under the limiter's Name, on the memory store, miniredis and real
// Redis.
func TestAllowLimitThreeTenants(t *testing.T) {
	all := stores(t)
	for _, name := range []string{"memory", "miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			if name != "redis" {
				t.Parallel() // a store and a clock of its own
			}
			cs := all[name](t)
			l := limitertest.New(t, core.Config{Store: cs.store, Name: "api", Limit: core.PerMinute(3),
				FailMode: core.FailClosed, Timeout: time.Second})
			tenants := map[string]core.Limit{"free": core.PerMinute(2), "team": core.PerMinute(5), "enterprise": core.PerHour(1000).WithBurst(9)}
			ctx := context.Background()
			for tenant, lim := range tenants {
				for i := 0; i <= lim.Capacity(); i++ {
					r, err := l.AllowLimit(ctx, tenant, 1, lim)
					if err != nil || r.Degraded {
						t.Fatalf("%s request %d: %+v %v", tenant, i+1, r, err)
					}
					if want := i < lim.Capacity(); r.Allowed != want {
						t.Fatalf("%s request %d: allowed %v, want %v (burst %d)", tenant, i+1, r.Allowed, want, lim.Capacity())
					}
					if r.Limit != lim || r.Name != "api" {
						t.Fatalf("%s: Result.Limit %v Name %q; want %v under %q", tenant, r.Limit, r.Name, lim, "api")
					}
					if want := max(0, lim.Capacity()-i-1); r.Remaining != want {
						t.Fatalf("%s request %d: %d remaining, want %d", tenant, i+1, r.Remaining, want)
					}
				}
			}
		})
	}
}

// TestAllowLimitSameBuckets: AllowLimit under Config.Limit and AllowN draw
// from one bucket, and a limit read per request keeps the limiter's bucket
// (its Name), not one of its own.
func TestAllowLimitSameBuckets(t *testing.T) {
	t.Parallel()
	ms := core.NewMemoryStore(core.WithClock(limitertest.NewClock().Now))
	l := limitertest.New(t, core.Config{Store: ms, Name: "api", Limit: core.PerMinute(3), FailMode: core.FailClosed})
	ctx := context.Background()
	for i := range 2 {
		if r, _ := l.AllowLimit(ctx, "k", 1, core.PerMinute(3)); !r.Allowed {
			t.Fatalf("AllowLimit %d under Config.Limit: %+v", i+1, r)
		}
	}
	if r, _ := l.AllowN(ctx, "k", 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("AllowN after two AllowLimit: %+v; want the third and last token", r)
	}
	if r, _ := l.AllowLimit(ctx, "k", 1, core.PerMinute(3)); r.Allowed {
		t.Fatalf("AllowLimit on an empty bucket: %+v", r)
	}
	l.AllowLimit(ctx, "k", 1, core.PerHour(50))
	l.AllowLimit(ctx, "other", 1, core.PerHour(50))
	if got := ms.Len(); got != 2 {
		t.Fatalf("store holds %d buckets after two subjects under two limits; want 2 (one per subject)", got)
	}
}

// TestAllowLimitRejects: a limit New would refuse, or a cost above lim's
// burst, is the caller's error; Config.Limit's burst does not matter.
func TestAllowLimitRejects(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(100), FailMode: core.FailOpen,
		Extra: []core.NamedLimit{{Name: "hour", Limit: core.PerHour(1000)}}})
	local := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(100), FailMode: core.FailLocal, Instances: 1 << 20})
	ctx := context.Background()
	cases := []struct {
		name string
		l    *core.Limiter
		n    int
		lim  core.Limit
		want error
	}{
		{"zero limit", l, 1, core.Limit{}, core.ErrInvalidLimit},
		{"negative rate", l, 1, core.PerSecond(-1), core.ErrInvalidLimit},
		{"period not whole microseconds", l, 1, core.Limit{Rate: 1, Period: 1500}, core.ErrInvalidLimit},
		{"negative burst", l, 1, core.PerSecond(1).WithBurst(-2), core.ErrInvalidLimit},
		{"burst too big for the headers", l, 1, core.Limit{Rate: 1, Period: 1 << 50, Burst: 1e16}, core.ErrInvalidLimit},
		{"FailLocal share cannot be computed", local, 1, core.PerDay(7), core.ErrInvalidLimit},
		{"cost above lim's burst", l, 6, core.PerMinute(5), core.ErrCostTooHigh},
		{"cost above an Extra's burst", l, 1001, core.PerMinute(5000), core.ErrCostTooHigh},
		{"empty key", l, 1, core.PerMinute(5), core.ErrEmptyKey},
		{"cost below 1", l, 0, core.PerMinute(5), core.ErrInvalidCost},
	}
	for _, c := range cases {
		key := "k"
		if c.want == core.ErrEmptyKey {
			key = ""
		}
		r, err := c.l.AllowLimit(ctx, key, c.n, c.lim)
		if !errors.Is(err, c.want) || r.Allowed || r.Limit != (core.Limit{}) {
			t.Errorf("%s: AllowLimit(%d, %+v) = %+v, %v; want %v", c.name, c.n, c.lim, r, err, c.want)
		}
	}
	if r, err := l.AllowLimit(ctx, "k", 5, core.PerMinute(5)); err != nil || !r.Allowed {
		t.Errorf("cost equal to lim's burst: %+v %v; want allowed", r, err)
	}
}

// TestAllowLimitWithExtra: lim takes Config.Limit's place and is decided
// together with the Extra limits, all or nothing.
func TestAllowLimitWithExtra(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(core.WithClock(limitertest.NewClock().Now)), Name: "min", Limit: core.PerMinute(3),
		Extra: []core.NamedLimit{{Name: "hour", Limit: core.PerHour(4)}}, FailMode: core.FailClosed})
	ctx := context.Background()
	tenant := core.PerMinute(10)
	for i := range 4 {
		r, _ := l.AllowLimit(ctx, "k", 1, tenant)
		if !r.Allowed || r.Policies[0].Limit != tenant || r.Policies[0].Name != "min" || r.Policies[1].Remaining != 3-i {
			t.Fatalf("request %d: %+v; want allowed under %v and the hour limit", i+1, r, tenant)
		}
	}
	r, _ := l.AllowLimit(ctx, "k", 1, tenant)
	if r.Allowed || r.Name != "hour" || r.Policies[0].Remaining != 6 {
		t.Fatalf("fifth request: %+v; want denied by the hour limit with 6 left under %v", r, tenant)
	}
}

// TestAllowLimitFailLocal: while the store is down, FailLocal's in-process
// bucket holds lim / Instances, not Config.Limit / Instances.
func TestAllowLimitFailLocal(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(100), FailMode: core.FailLocal, Instances: 2,
		DenyCacheSize: -1})
	ctx := context.Background()
	share := core.Limit{Rate: 10, Period: 2 * time.Minute, Burst: 5}
	for i := 0; i <= 5; i++ {
		r, err := l.AllowLimit(ctx, "k", 1, core.PerMinute(10))
		if err != nil || !r.Fallback || r.Allowed != (i < 5) || r.Limit != share {
			t.Fatalf("degraded request %d: %+v %v; want allowed %v under %v", i+1, r, err, i < 5, share)
		}
	}
}

// planStore answers as a store would for a bucket that has served 10
// requests: a limit whose burst is at most 10 denies, a bigger one allows.
type planStore struct{ calls atomic.Int64 }

func (s *planStore) store() core.Store {
	return fakestore.New(func(ctx context.Context, c bucket.Ask) (core.Outcome, error) {
		return s.Take(ctx, c.Subj, c.N, c.Policies, c.Each)
	})
}

func (s *planStore) Take(_ context.Context, _ string, n int, ps []core.Policy, _ []core.Outcome) (core.Outcome, error) {
	s.calls.Add(1)
	if ps[0].Capacity/ps[0].Unit <= 10 {
		return core.Outcome{RetryAfter: time.Minute, ResetAfter: time.Minute}, nil
	}
	return core.Outcome{Allowed: true, Remaining: ps[0].Capacity/ps[0].Unit - 11, ResetAfter: time.Minute}, nil
}

// TestDenyCacheKeyedByLimit: a denial cached under one limit answers only
// requests under that limit; a tenant moved to a bigger plan is asked of
// the store at once and allowed.
func TestDenyCacheKeyedByLimit(t *testing.T) {
	t.Parallel()
	s := &planStore{}
	l := limitertest.New(t, core.Config{Store: s.store(), Limit: core.PerMinute(5), FailMode: core.FailClosed, Timeout: time.Second})
	ctx := context.Background()
	small, big := core.PerMinute(5), core.PerMinute(100)
	for i := range 3 {
		if r, _ := l.AllowLimit(ctx, "k", 1, small); r.Allowed || r.Degraded {
			t.Fatalf("request %d under %v: %+v; want denied", i+1, small, r)
		}
	}
	if got := s.calls.Load(); got != 1 {
		t.Fatalf("%d store calls for three denials under one limit; want 1 (then cached)", got)
	}
	r, _ := l.AllowLimit(ctx, "k", 1, big)
	if !r.Allowed || r.Limit != big {
		t.Fatalf("request under %v after a denial under %v: %+v; want the store's answer, allowed", big, small, r)
	}
	if got := s.calls.Load(); got != 2 {
		t.Fatalf("%d store calls; want 2: the denial under %v must not answer %v", got, small, big)
	}
	if r, _ := l.AllowN(ctx, "k", 1); r.Allowed {
		t.Fatalf("AllowN under Config.Limit %v: %+v; want denied", small, r)
	}
}

// TestAllowLimitCacheBounded: a stream of distinct limits (a bug reading
// quotas, or an attacker choosing them) keeps the policy cache bounded,
// and every limit is still decided under its own numbers.
func TestAllowLimitCacheBounded(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(5), FailMode: core.FailOpen})
	ctx := context.Background()
	for i := 1; i <= 5000; i++ {
		lim := core.PerHour(i)
		r, err := l.AllowLimit(ctx, "k"+strconv.Itoa(i), 1, lim)
		if err != nil || r.Limit != lim || r.Remaining != i-1 {
			t.Fatalf("limit %v: %+v %v", lim, r, err)
		}
		if n := core.LimitSets(l); n > core.MaxLimitSets {
			t.Fatalf("%d cached limits after %d distinct ones; want at most %d", n, i, core.MaxLimitSets)
		}
	}
}

// TestAllowLimitAllocs: on the memory store, a limit already seen costs
// no allocation, as AllowN does.
func TestAllowLimitAllocs(t *testing.T) {
	l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(5), FailMode: core.FailOpen})
	ctx := context.Background()
	lim := core.PerSecond(1 << 30)
	l.AllowLimit(ctx, "k", 1, lim)
	if got := testing.AllocsPerRun(100, func() { l.AllowLimit(ctx, "k", 1, lim) }); got != 0 {
		t.Fatalf("AllowLimit allocates %v per decision; want 0", got)
	}
}
