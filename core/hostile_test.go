package core_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// Limits at the edges of the integer range. Stores count tokens in units
// so that refill per microsecond is whole; every scaled value must stay
// within 2^53 (Lua numbers are doubles). New rejects what would not; what it
// accepts must decide exactly, in memory, on miniredis and on real Redis,
// and its durations must fit a time.Duration.

// edgeLimits are accepted limits at the edge: each keeps Burst × unit +
// refill within 2^53, some exactly at it.
var edgeLimits = []struct {
	name  string
	limit core.Limit
	reset time.Duration // ResetAfter once the whole burst is taken
}{
	{"burst 2^53-1 at a token a µs", core.Limit{Rate: 1, Period: time.Microsecond, Burst: 1<<53 - 1}, (1<<53 - 1) * time.Microsecond},
	{"2^52 tokens a µs", core.Limit{Rate: 1 << 52, Period: time.Microsecond, Burst: 1 << 52}, time.Microsecond},
	{"a token per 9e15 µs (285 years)", core.Limit{Rate: 1, Period: 9e15 * time.Microsecond, Burst: 1}, 9e15 * time.Microsecond},
	{"a billion a second", core.PerSecond(1e9), time.Second},
	{"one per µs, burst 1", core.Limit{Rate: 1, Period: time.Microsecond, Burst: 1}, time.Microsecond},
	{"7 per 3 µs, burst 2^50", core.Limit{Rate: 7, Period: 3 * time.Microsecond, Burst: 1 << 50}, time.Duration(math.Ceil(float64(1<<50)*3/7)) * time.Microsecond},
}

// edgeStores are the conformance suite's memory, miniredis and real Redis
// stores: the script's arithmetic is the same on every topology, which the
// conformance suite covers.
func edgeStores(t *testing.T) map[string]func(t *testing.T) clockStore {
	all := stores(t)
	some := map[string]func(t *testing.T) clockStore{}
	for _, name := range []string{"memory", "miniredis", "redis"} {
		if mk, ok := all[name]; ok {
			some[name] = mk
		}
	}
	return some
}

func TestEdgeLimitsRejected(t *testing.T) {
	t.Parallel()
	ms := core.NewMemoryStore()
	for _, tc := range []struct {
		name  string
		limit core.Limit
		inst  int
		want  error
	}{
		{"burst 2^53 at a token a µs", core.Limit{Rate: 1, Period: time.Microsecond, Burst: 1 << 53}, 1, core.ErrInvalidLimit},
		{"2^53 tokens a µs", core.Limit{Rate: 1 << 53, Period: time.Microsecond}, 1, core.ErrInvalidLimit},
		{"max int rate", core.Limit{Rate: math.MaxInt, Period: time.Second}, 1, core.ErrInvalidLimit},
		{"max int burst", core.PerHour(1).WithBurst(math.MaxInt), 1, core.ErrInvalidLimit},
		{"max int rate and burst per µs", core.Limit{Rate: math.MaxInt, Period: time.Microsecond, Burst: math.MaxInt}, 1, core.ErrInvalidLimit},
		{"a token per 2^53+1 µs", core.Limit{Rate: 1, Period: (1<<53 + 1) * time.Microsecond, Burst: 1}, 1, core.ErrInvalidLimit},
		{"longest Duration period", core.Limit{Rate: 1, Period: math.MaxInt64, Burst: 1}, 1, core.ErrInvalidLimit},
		{"2^53 an hour", core.PerHour(1 << 53), 1, core.ErrInvalidLimit},
		{"a token a day, burst 2^40", core.PerDay(1).WithBurst(1 << 40), 1, core.ErrInvalidLimit},
		{"FailLocal period × Instances overflows", core.Limit{Rate: 1, Period: 9e15 * time.Microsecond, Burst: 1}, 2, core.ErrInvalidConfig},
		{"FailLocal huge Instances", core.PerSecond(10), math.MaxInt, core.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := core.FailOpen
			if tc.inst > 1 {
				mode = core.FailLocal
			}
			_, err := core.New(core.Config{Store: ms, Limit: tc.limit, FailMode: mode, Instances: tc.inst})
			if !errors.Is(err, tc.want) {
				t.Fatalf("New(%+v, Instances %d): got %v, want %v", tc.limit, tc.inst, err, tc.want)
			}
		})
	}
}

func TestEdgeLimitsDecide(t *testing.T) {
	ctx := context.Background()
	for storeName, mk := range edgeStores(t) {
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range edgeLimits {
				t.Run(tc.name, func(t *testing.T) {
					cs := mk(t)
					if !cs.realTime {
						t.Parallel() // a store and a clock of its own
					}
					cfg := core.Config{Store: cs.store, Limit: tc.limit, Name: "edge", FailMode: core.FailClosed, Timeout: 5 * time.Second, DenyCacheSize: -1}
					if tc.limit.Capacity() > 999_999_999_999_999 {
						// Beyond RFC 9651's integers: New refuses it (the
						// stores' arithmetic there is TestMemoryStoreModel's).
						if _, err := core.New(cfg); !errors.Is(err, core.ErrInvalidLimit) {
							t.Fatalf("New with a burst of %d: %v, want ErrInvalidLimit", tc.limit.Capacity(), err)
						}
						return
					}
					l := limitertest.New(t, cfg)
					c := tc.limit.Capacity()
					res, err := l.AllowN(ctx, "edge", c)
					if err != nil || res.Degraded || !res.Allowed || res.Remaining != 0 || res.ResetAfter != tc.reset {
						t.Fatalf("AllowN(burst %d): %+v, %v; want allowed, 0 left, ResetAfter %v", c, res, err, tc.reset)
					}
					res, err = l.AllowN(ctx, "edge", c)
					if err != nil || res.Degraded {
						t.Fatalf("second AllowN(burst): %+v, %v", res, err)
					}
					checkResult(t, storeName, res)
					if cs.realTime {
						// Time moved on: a fast refill may have served it again.
						if !res.Allowed && res.RetryAfter > tc.reset {
							t.Fatalf("second AllowN(burst): %+v; want RetryAfter ≤ %v", res, tc.reset)
						}
						return
					}
					if res.Allowed || res.RetryAfter != tc.reset || res.Remaining != 0 {
						t.Fatalf("second AllowN(burst) at the same instant: %+v; want denied, RetryAfter %v", res, tc.reset)
					}
					if tc.reset > 100*365*24*time.Hour {
						// Moving a server clock 285 years on would pass 2^53 µs
						// of Unix time (the year 2255), beyond the script's range.
						return
					}
					cs.advance(tc.reset)
					res, err = l.AllowN(ctx, "edge", c)
					if err != nil || !res.Allowed || res.Remaining != 0 {
						t.Fatalf("AllowN(burst) once full again: %+v, %v; want allowed", res, err)
					}
				})
			}
		})
	}
}

// TestCostAboveBurst: a cost no bucket could ever hold is the caller's
// mistake, reported as an error, and takes nothing — with one limit,
// several (the smallest burst binds), and in the FailLocal fallback, whose
// smaller share denies it instead (degraded, nothing taken).
func TestCostAboveBurst(t *testing.T) {
	ctx := context.Background()
	forStores(t, edgeStores(t), func(t *testing.T, cs clockStore) {
		l := limitertest.New(t, core.Config{
			Store: cs.store, Limit: core.PerMinute(5), FailMode: core.FailClosed, Timeout: 5 * time.Second,
			Extra: []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(4)}},
		})
		for _, n := range []int{5, 6, math.MaxInt, math.MaxInt32 + 1} {
			if res, err := l.AllowN(ctx, "k", n); !errors.Is(err, core.ErrCostTooHigh) || res.Allowed {
				t.Errorf("AllowN(%d) with bursts 5 and 4: %+v, %v; want ErrCostTooHigh", n, res, err)
			}
		}
		for _, n := range []int{0, -1, math.MinInt} {
			if res, err := l.AllowN(ctx, "k", n); !errors.Is(err, core.ErrInvalidCost) || res.Allowed {
				t.Errorf("AllowN(%d): %+v, %v; want ErrInvalidCost", n, res, err)
			}
		}
		res, err := l.AllowN(ctx, "k", 4)
		if err != nil || !res.Allowed || res.Policies[0].Remaining != 1 || res.Policies[1].Remaining != 0 {
			t.Fatalf("AllowN(4) after the refused costs: %+v, %v; want allowed with 1 and 0 left: nothing was taken before", res, err)
		}
	})
	t.Run("FailLocal share", func(t *testing.T) {
		l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(10), FailMode: core.FailLocal, Instances: 5})
		res, err := l.AllowN(ctx, "k", 3) // a share holds 2
		if err != nil || res.Allowed || !res.Degraded || res.RetryAfter <= 0 {
			t.Fatalf("AllowN(3) above the local share of 2: %+v, %v; want a degraded denial", res, err)
		}
		for i, want := range []int{1, 0} {
			if res, _ := l.Allow(ctx, "k"); !res.Allowed || res.Remaining != want {
				t.Fatalf("Allow %d after it: %+v; want allowed with %d left (nothing taken)", i+1, res, want)
			}
		}
	})
}

// TestStoreCostOverflow: a Store used directly (without a Limiter, which
// refuses costs above the burst) must not be fooled by a huge cost. The
// memory store computes n × Unit in int64 and, wrapped negative, allows it
// with a negative Remaining; the script denies it, but its RetryAfter comes
// back as 0 once the microseconds pass what Redis can return as an integer.
func TestStoreCostOverflow(t *testing.T) {
	t.Parallel()
	ps, err := core.Policies(core.NamedLimit{Name: "p", Limit: core.PerMinute(5)})
	if err != nil {
		t.Fatal(err)
	}
	for name, mk := range edgeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t).store
			for _, n := range []int{int(math.MaxInt64/ps[0].Unit) + 1, 1 << 40, math.MaxInt} {
				o, err := core.Take(context.Background(), s, "s", n, ps, nil)
				if err == nil && (o.Allowed || o.Remaining < 0 || o.RetryAfter <= 0) {
					t.Errorf("Take(n=%d) on a burst of 5: %+v; want denied with a RetryAfter (or an error)", n, o)
				}
			}
		})
	}
}

// TestDefaultNameSubMillisecondPeriod: the default policy name comes from
// Limit.String, and must itself be a valid Name for every valid limit:
// time.Duration prints microseconds as "µs", which is not ASCII.
func TestDefaultNameSubMillisecondPeriod(t *testing.T) {
	t.Parallel()
	for _, lim := range []core.Limit{
		{Rate: 1, Period: time.Microsecond},
		{Rate: 3, Period: 500 * time.Microsecond, Burst: 7},
		{Rate: 1, Period: 1500 * time.Microsecond},
	} {
		l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: lim, FailMode: core.FailOpen})
		if err != nil {
			t.Errorf("New(%+v) without a Name: %v; the default name must be valid", lim, err)
			continue
		}
		if _, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), Name: l.Name(), FailMode: core.FailOpen}); err != nil {
			t.Errorf("default name %q is not a valid Name: %v", l.Name(), err)
		}
	}
}
