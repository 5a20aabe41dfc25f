package core_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// clockStore is a store under test with a clock the test can move.
type clockStore struct {
	store   core.Store
	advance func(time.Duration)
	// realTime is set when the clock cannot be moved (real Redis): the
	// suite then only runs cases that do not need time to pass.
	realTime bool
}

// stores returns every store the conformance suite runs against. The
// Cluster and Sentinel topologies are started once per top-level test (t)
// and shared by its cases, each under its own key prefix.
func stores(t *testing.T) map[string]func(t *testing.T) clockStore {
	var cluster *redis.ClusterClient
	var sentinel *redis.Client
	return map[string]func(t *testing.T) clockStore{
		"cluster": func(sub *testing.T) clockStore {
			if testing.Short() {
				sub.Skip("Redis Cluster: skipped with -short")
			}
			redistest.Installed(sub) // t's skip would fail sub
			if cluster == nil {
				cluster = redistest.StartCluster(t, 3, 0).Client()
			}
			prefix := redistest.Prefix(sub)
			return clockStore{
				store:    core.NewRedisStore(cluster, core.WithPrefix(prefix)),
				advance:  func(d time.Duration) { backdateCluster(sub, cluster, prefix, d) },
				realTime: true,
			}
		},
		"sentinel": func(sub *testing.T) clockStore {
			if testing.Short() {
				sub.Skip("Redis Sentinel: skipped with -short")
			}
			redistest.Installed(sub)
			if sentinel == nil {
				sentinel = redistest.StartSentinel(t).FailoverClient()
			}
			prefix := redistest.Prefix(sub)
			return clockStore{
				store:    core.NewRedisStore(sentinel, core.WithPrefix(prefix)),
				advance:  func(d time.Duration) { backdate(sub, sentinel, prefix, d) },
				realTime: true,
			}
		},
		"memory": func(t *testing.T) clockStore {
			c := limitertest.NewClock()
			return clockStore{store: core.NewMemoryStore(core.WithClock(c.Now)), advance: c.Advance}
		},
		"miniredis": func(t *testing.T) clockStore {
			m := miniredis.RunT(t)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			m.SetTime(now)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			return clockStore{
				store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))),
				advance: func(d time.Duration) {
					now = now.Add(d)
					m.SetTime(now)
					if d > 0 {
						m.FastForward(d)
					}
				},
			}
		},
		"redis-batching": batchingStore,
		"redis": func(t *testing.T) clockStore {
			c := redistest.Client(t)
			prefix := redistest.Prefix(t)
			return clockStore{
				store:    core.NewRedisStore(c, core.WithPrefix(prefix)),
				advance:  func(d time.Duration) { backdate(t, c, prefix, d) },
				realTime: true,
			}
		},
	}
}

// forStores runs f in a subtest per store of all, each on a store of its
// own: in parallel where the store's clock is the test's own.
func forStores(t *testing.T, all map[string]func(t *testing.T) clockStore, f func(t *testing.T, cs clockStore)) {
	for name, mk := range all {
		t.Run(name, func(t *testing.T) {
			cs := mk(t)
			if !cs.realTime {
				t.Parallel() // a store and a clock of its own
			}
			f(t, cs)
		})
	}
}

// exactOnly names the cases that hang on less than a millisecond: they run
// on stopped clocks only.
var exactOnly = map[string]bool{"a day, counted in ms": true, "30 days, counted in ms": true, "a billion a second": true,
	"rounding only where the scale changes": true}

// step is one decision of a conformance case and what it must return.
type step struct {
	wait  time.Duration // clock advance before the decision
	key   string        // default "k"
	n     int           // default 1
	lim   core.Limit    // default the case's limit; the policy name stays
	peek  bool          // Peek instead of Take
	allow bool
	rem   int64
	retry time.Duration
	reset time.Duration
}

var conformance = []struct {
	name  string
	limit core.Limit
	steps []step
}{
	{"burst then deny", core.PerMinute(3), []step{
		{allow: true, rem: 2, reset: 20 * time.Second},
		{allow: true, rem: 1, reset: 40 * time.Second},
		{allow: true, rem: 0, reset: 60 * time.Second},
		{allow: false, rem: 0, retry: 20 * time.Second, reset: 60 * time.Second},
	}},
	{"refill over time", core.PerMinute(3), []step{
		{n: 3, allow: true, rem: 0, reset: 60 * time.Second},
		{wait: 19 * time.Second, allow: false, rem: 0, retry: time.Second, reset: 41 * time.Second},
		{wait: time.Second, allow: true, rem: 0, reset: 60 * time.Second},
		{wait: 50 * time.Second, allow: true, rem: 1, reset: 30 * time.Second},
	}},
	{"cost n", core.PerSecond(10), []step{
		{n: 4, allow: true, rem: 6, reset: 400 * time.Millisecond},
		{n: 7, allow: false, rem: 6, retry: 100 * time.Millisecond, reset: 400 * time.Millisecond},
		{n: 6, allow: true, rem: 0, reset: time.Second},
		{wait: 250 * time.Millisecond, n: 3, allow: false, rem: 2, retry: 50 * time.Millisecond, reset: 750 * time.Millisecond},
	}},
	{"fractional tokens", core.Limit{Rate: 3, Period: time.Second, Burst: 2}, []step{
		{n: 2, allow: true, rem: 0, reset: 666667 * time.Microsecond},
		{wait: 200 * time.Millisecond, allow: false, rem: 0, retry: 133334 * time.Microsecond, reset: 466667 * time.Microsecond},
		{wait: 133333 * time.Microsecond, allow: false, rem: 0, retry: 1 * time.Microsecond, reset: 333334 * time.Microsecond},
		// 1000002 units, 1e6 taken: 2 left, (2e6-2)/3 µs to fill.
		{wait: time.Microsecond, allow: true, rem: 0, reset: 666666 * time.Microsecond},
	}},
	{"burst above rate", core.PerHour(1).WithBurst(5), []step{
		{n: 5, allow: true, rem: 0, reset: 5 * time.Hour},
		{wait: time.Hour, allow: true, rem: 0, reset: 5 * time.Hour},
		{allow: false, rem: 0, retry: time.Hour, reset: 5 * time.Hour},
	}},
	{"independent keys", core.PerMinute(1), []step{
		{key: "a", allow: true, rem: 0, reset: time.Minute},
		{key: "a", allow: false, rem: 0, retry: time.Minute, reset: time.Minute},
		{key: "b", allow: true, rem: 0, reset: time.Minute},
	}},
	{"bucket full again after idling", core.PerSecond(2), []step{
		{n: 2, allow: true, rem: 0, reset: time.Second},
		{wait: time.Hour, n: 2, allow: true, rem: 0, reset: time.Second},
	}},
	// A failover can turn the server's clock back: a bucket stamped ahead
	// of it is read as of its stamp (no refill, nothing lost) and re-stamped
	// at the current time, so it refills from now: it never freezes.
	{"clock moved back", core.PerSecond(1).WithBurst(2), []step{
		{allow: true, rem: 1, reset: time.Second},
		{wait: -5 * time.Second, allow: true, rem: 0, reset: 2 * time.Second},
		{wait: 500 * time.Millisecond, allow: false, rem: 0, retry: 500 * time.Millisecond, reset: 1500 * time.Millisecond},
		{wait: 500 * time.Millisecond, allow: true, rem: 0, reset: 2 * time.Second},
	}},
	{"an hour ahead, then back", core.PerSecond(1).WithBurst(2), []step{
		{n: 2, allow: true, rem: 0, reset: 2 * time.Second},
		{wait: time.Hour, n: 2, allow: true, rem: 0, reset: 2 * time.Second},
		{wait: -time.Hour, allow: false, rem: 0, retry: time.Second, reset: 2 * time.Second},
		// Refused no longer than the RetryAfter announced.
		{wait: time.Second, allow: true, rem: 0, reset: 2 * time.Second},
		{allow: false, rem: 0, retry: time.Second, reset: 2 * time.Second},
	}},
	{"ten seconds back", core.PerSecond(10), []step{
		{n: 10, allow: true, rem: 0, reset: time.Second},
		{wait: -10 * time.Second, allow: false, rem: 0, retry: 100 * time.Millisecond, reset: time.Second},
		{wait: 100 * time.Millisecond, allow: true, rem: 0, reset: time.Second},
	}},
	{"a peek never re-stamps", core.PerSecond(10), []step{
		{n: 10, allow: true, rem: 0, reset: time.Second},
		{wait: -10 * time.Second, peek: true, allow: false, rem: 0, retry: 100 * time.Millisecond, reset: time.Second},
		// Still ahead: the take re-stamps.
		{wait: 100 * time.Millisecond, allow: false, rem: 0, retry: 100 * time.Millisecond, reset: time.Second},
		{wait: 100 * time.Millisecond, allow: true, rem: 0, reset: time.Second},
	}},
	// A bucket keeps the limit that wrote it: read under another limit of
	// the same name, what was spent carries over (new capacity - spent,
	// clamped to [0, capacity]), and the new limit refills it at its own
	// rate from the bucket's stamp, though a decision that writes nothing
	// (a denied take, a peek) leaves it under the limit that wrote it; the
	// bucket refilled by that limit to now, then carried, holds when it is
	// the fuller. Either way a RetryAfter is the true one.
	// DESIGN §3, issue 36 item 7: the clamped state is what the new limit
	// refills from, at its own rate, though its denials write nothing.
	{"a lowered limit refills from its clamp", core.PerMinute(100), []step{
		{n: 100, allow: true, rem: 0, reset: time.Minute},
		{lim: core.PerMinute(60), allow: false, rem: 0, retry: time.Second, reset: time.Minute},
		{wait: 500 * time.Millisecond, lim: core.PerMinute(60), allow: false, rem: 0, retry: 500 * time.Millisecond, reset: 59500 * time.Millisecond},
		{wait: 500 * time.Millisecond, lim: core.PerMinute(60), allow: true, rem: 0, reset: time.Minute},
		// That take left the bucket in 100/min (100 spent, more than 60
		// holds): it reads full under 60/min once 100/min has refilled it,
		// in 59.6s, before 60/min's own refill from the clamp would.
		{lim: core.PerMinute(60), allow: false, rem: 0, retry: time.Second, reset: 59600 * time.Millisecond},
	}},
	{"a raised limit: what was spent carries over", core.PerMinute(60), []step{
		{n: 40, allow: true, rem: 20, reset: 40 * time.Second},
		{lim: core.PerMinute(100), peek: true, allow: true, rem: 60, reset: 24 * time.Second},
		{lim: core.PerMinute(100), n: 60, allow: true, rem: 0, reset: time.Minute},
		{lim: core.PerMinute(100), allow: false, rem: 0, retry: 600 * time.Millisecond, reset: time.Minute},
		// Back to 60: 100 spent, clamped at 0, refilled at 60 a minute.
		{allow: false, rem: 0, retry: time.Second, reset: time.Minute},
		{wait: time.Second, allow: true, rem: 0, reset: time.Minute},
	}},
	// A take under the lower limit from a bucket spent beyond its capacity
	// keeps the bucket in the limit that spent it, less the take: that
	// limit still counts all it spent (DESIGN §3: admitted cost stays
	// within the more generous limit's bound), here 100 tokens, 1⅔
	// refilled at 100/min by the take, less 1: ⅓ short of the next one.
	{"a lower limit's take keeps a spend it cannot hold", core.PerMinute(100), []step{
		{n: 100, allow: true, rem: 0, reset: time.Minute},
		{wait: time.Second, lim: core.PerMinute(60), allow: true, rem: 0, reset: time.Minute},
		{peek: true, allow: false, rem: 0, retry: 200 * time.Millisecond, reset: 59600 * time.Millisecond},
		{wait: 200 * time.Millisecond, allow: true, rem: 0, reset: time.Minute},
	}},
	// And the lower limit keeps what it refilled from its clamp, less its
	// take: 10s after 100/min spent 100, 60/min has 10 tokens, all its
	// own, and 100/min counts the 10 it took.
	{"a lower limit keeps its own refill under a spend it cannot hold", core.PerMinute(100), []step{
		{n: 100, allow: true, rem: 0, reset: time.Minute},
		{wait: 10 * time.Second, lim: core.PerMinute(60), allow: true, rem: 9, reset: 51 * time.Second},
		{lim: core.PerMinute(60), n: 9, allow: true, rem: 0, reset: time.Minute},
		{lim: core.PerMinute(60), allow: false, rem: 0, retry: time.Second, reset: 56 * time.Second},
		{peek: true, allow: true, rem: 6, reset: 56 * time.Second},
	}},
	// The same across time units: 123457 a day (ms) spent, then 100000 a
	// day (µs) 10s later: 11.57 tokens of its own, 1 taken, 10.57 left
	// (the stamp set back by whole ms, rounded down: under 1ms of refill
	// lost); 123457 a day counts the 11 taken: 14.29 refilled, 3.29 left.
	{"a lowered day's quota keeps its own refill", core.PerDay(123457), []step{
		{n: 123457, allow: true, rem: 0, reset: 24 * time.Hour},
		{wait: 10 * time.Second, lim: core.PerDay(100000), allow: true, rem: 10, reset: 24*time.Hour - 9136*time.Millisecond},
		{lim: core.PerDay(100000), n: 10, allow: true, rem: 0, reset: 24*time.Hour - 496*time.Millisecond},
		{lim: core.PerDay(100000), allow: false, rem: 0, retry: 368 * time.Millisecond, reset: 24*time.Hour - 2301*time.Millisecond},
		{peek: true, allow: true, rem: 3, reset: 24*time.Hour - 2301*time.Millisecond},
	}},
	// 100000 a day counts in µs, 123457 a day in ms.
	{"a day's quota raised, then lowered", core.PerDay(100000), []step{
		{n: 50000, allow: true, rem: 50000, reset: 12 * time.Hour},
		{lim: core.PerDay(123457), peek: true, allow: true, rem: 73457, reset: 34991941 * time.Millisecond},
		{lim: core.PerDay(123457), n: 73457, allow: true, rem: 0, reset: 24 * time.Hour},
		{lim: core.PerDay(123457), allow: false, rem: 0, retry: 700 * time.Millisecond, reset: 24 * time.Hour},
		{wait: 700 * time.Millisecond, lim: core.PerDay(123457), allow: true, rem: 0, reset: 24 * time.Hour},
		// Lowered: 123457 spent clamps at 0, which refills at 100000 a day.
		{allow: false, rem: 0, retry: 864 * time.Millisecond, reset: 24 * time.Hour},
		{wait: 864 * time.Millisecond, allow: true, rem: 0, reset: 24 * time.Hour},
	}},
	// 3 a second counts 10^6 units a token, 2 a second 5×10^5: a fraction
	// of a unit spent rounds up, once, where the scale changes; an
	// unchanged limit reads its bucket exactly.
	{"rounding only where the scale changes", core.PerSecond(3), []step{
		{allow: true, rem: 2, reset: 333334 * time.Microsecond},
		// 999997 units spent: ⌈999997/2⌉ = 499999 of 10^6 spent, 500001
		// left; the bucket fills at 3 a second.
		{wait: time.Microsecond, lim: core.PerSecond(2), peek: true, allow: true, rem: 1, reset: 333333 * time.Microsecond},
		{lim: core.PerSecond(3), peek: true, allow: true, rem: 2, reset: 333333 * time.Microsecond},
		{lim: core.PerSecond(2), allow: true, rem: 0, reset: 999999 * time.Microsecond},
		// 999999 spent of 10^6 is 1999998 of 3×10^6: 1000002 left, which
		// fills at 3 a second.
		{lim: core.PerSecond(3), peek: true, allow: true, rem: 1, reset: 666666 * time.Microsecond},
	}},
	// Limits whose numbers do not fit below 2^53 in µs count in ms.
	{"a day, counted in ms", core.PerDay(123457), []step{
		{n: 123457, allow: true, rem: 0, reset: 24 * time.Hour},
		{allow: false, rem: 0, retry: 700 * time.Millisecond, reset: 24 * time.Hour},
		{wait: 699 * time.Millisecond, allow: false, rem: 0, retry: time.Millisecond, reset: 24*time.Hour - 699*time.Millisecond},
		{wait: time.Millisecond, allow: true, rem: 0, reset: 24 * time.Hour},
	}},
	{"30 days, counted in ms", core.Limit{Rate: 99999, Period: 30 * 24 * time.Hour}, []step{
		{allow: true, rem: 99998, reset: 25921 * time.Millisecond},
		{n: 99998, allow: true, rem: 0, reset: 30 * 24 * time.Hour},
		{wait: 25920 * time.Millisecond, allow: false, rem: 0, retry: time.Millisecond, reset: 30*24*time.Hour - 25920*time.Millisecond},
	}},
	{"a billion a second", core.PerSecond(1e9), []step{
		{n: 1e9, allow: true, rem: 0, reset: time.Second},
		{allow: false, rem: 0, retry: time.Microsecond, reset: time.Second},
		{wait: 500 * time.Millisecond, n: 5e8, allow: true, rem: 0, reset: time.Second},
	}},
	{"keys with braces and long keys", core.PerMinute(1), []step{
		{key: "{a}", allow: true, rem: 0, reset: time.Minute},
		{key: "a", allow: true, rem: 0, reset: time.Minute},
		{key: "~a", allow: true, rem: 0, reset: time.Minute},
		{key: string(make([]byte, 65536)), allow: true, rem: 0, reset: time.Minute},
		{key: string(make([]byte, 65536)), allow: false, rem: 0, retry: time.Minute, reset: time.Minute},
	}},
}

func policyOf(t *testing.T, name string, l core.Limit) core.Policy {
	t.Helper()
	ps, err := core.Policies(core.NamedLimit{Name: name, Limit: l})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func TestStoreConformance(t *testing.T) {
	for storeName, mk := range stores(t) {
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) {
					s := mk(t)
					if !s.realTime {
						t.Parallel() // a store and a clock of its own
					}
					if s.realTime && exactOnly[tc.name] {
						t.Skip("needs a stopped clock")
					}
					if s.realTime {
						runLoose(t, s, tc.limit, tc.steps)
						return
					}
					runExact(t, s, tc.limit, tc.steps)
				})
			}
		})
	}
}

func runExact(t *testing.T, s clockStore, l core.Limit, steps []step) {
	t.Helper()
	for i, st := range steps {
		if st.wait != 0 {
			s.advance(st.wait)
		}
		key, n := orKey(st.key), max(st.n, 1)
		got, err := decideStep(t, s.store, l, st, key, n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := core.Outcome{Allowed: st.allow, Remaining: st.rem, RetryAfter: st.retry, ResetAfter: st.reset}
		if got != want {
			t.Errorf("step %d: got %+v, want %+v", i, got, want)
		}
	}
}

// backdate moves every bucket under prefix d into the past: to the script,
// which only ever uses now - ts, that is d passing on the server's clock.
func backdate(t *testing.T, c *redis.Client, prefix string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "} ") {
			continue // a call's replay record, not a bucket
		}
		v, err := c.Get(ctx, k).Result()
		if err != nil {
			continue // expired meanwhile
		}
		var units, ts int64
		var id string
		if _, err := fmt.Sscanf(v, "%d:%d:%s", &units, &ts, &id); err != nil {
			t.Fatalf("bucket %q holds %q: %v", k, v, err)
		}
		ttl := c.PTTL(ctx, k).Val() - d
		if ttl <= 0 {
			c.Del(ctx, k)
			continue
		}
		// ts counts the policy's ticks since the Unix epoch: µs, ms or s.
		tick := time.Microsecond
		switch {
		case ts < 1e11:
			tick = time.Second
		case ts < 1e14:
			tick = time.Millisecond
		}
		c.Set(ctx, k, fmt.Sprintf("%d:%d:%s", units, ts-int64(d/tick), id), ttl)
	}
}

// backdateCluster is backdate on every primary of a Cluster.
func backdateCluster(t *testing.T, c *redis.ClusterClient, prefix string, d time.Duration) {
	t.Helper()
	err := c.ForEachMaster(context.Background(), func(_ context.Context, node *redis.Client) error {
		backdate(t, node, prefix, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runLoose checks a case on a clock that keeps moving (real Redis, time
// passed by backdating buckets). The server's clock runs ahead of the
// case's by the real time the case has taken, at most drift: that much
// more refill can raise Remaining and lower RetryAfter and ResetAfter, so
// those are checked within it. A denial the drift could have turned into
// an admission (its RetryAfter is not over drift) cannot be checked: the
// case stops there, logged, however slow the machine — never run again.
// Cases whose outcome hangs on a microsecond are left to the exact stores.
func runLoose(t *testing.T, cs clockStore, l core.Limit, steps []step) {
	t.Helper()
	const slack = 250 * time.Millisecond // the script counts some limits in ms
	var start time.Time
	for i, st := range steps {
		if st.wait != 0 {
			if st.retry%time.Millisecond != 0 || st.reset%time.Millisecond != 0 {
				t.Skipf("steps 0-%d checked; step %d hangs on a microsecond boundary: it needs a stopped clock (the exact stores check it)", i-1, i)
			}
			cs.advance(st.wait)
		}
		if start.IsZero() {
			start = time.Now()
		}
		got, err := decideStep(t, cs.store, l, st, orKey(st.key), max(st.n, 1))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		drift := time.Since(start)
		if !st.allow && st.retry <= drift {
			t.Logf("steps 0-%d checked; step %d's denial lasts %v, and the case has taken %v of real time: not checked", i-1, i, st.retry, drift)
			return
		}
		lim := l
		if st.lim != (core.Limit{}) {
			lim = st.lim
		}
		refill := int64(math.Ceil(float64(drift) * float64(lim.Rate) / float64(lim.Period)))
		if got.Allowed != st.allow || got.Remaining < st.rem || got.Remaining > st.rem+refill {
			t.Errorf("step %d: got allowed=%v remaining=%d, want %v %d (%v of drift: up to %d more)", i, got.Allowed, got.Remaining, st.allow, st.rem, drift, refill)
		}
		if got.RetryAfter > st.retry || st.retry > 0 && got.RetryAfter < st.retry-slack-drift {
			t.Errorf("step %d: RetryAfter %v, want %v less at most %v", i, got.RetryAfter, st.retry, slack+drift)
		}
		if got.ResetAfter > st.reset || got.ResetAfter < st.reset-slack-drift {
			t.Errorf("step %d: ResetAfter %v, want %v less at most %v", i, got.ResetAfter, st.reset, slack+drift)
		}
	}
}

// decideStep runs st on s: a Take, or a Peek, under the step's limit (the
// case's by default), always under the policy name "conf".
func decideStep(t *testing.T, s core.Store, l core.Limit, st step, key string, n int) (core.Outcome, error) {
	t.Helper()
	if st.lim != (core.Limit{}) {
		l = st.lim
	}
	p := []core.Policy{policyOf(t, "conf", l)}
	if st.peek {
		return s.(interface {
			Peek(ctx context.Context, subject string, n int, policies []core.Policy, each []core.Outcome) (core.Outcome, error)
		}).Peek(context.Background(), key, n, p, nil)
	}
	return core.Take(context.Background(), s, key, n, p, nil)
}

func orKey(k string) string {
	if k == "" {
		return "k"
	}
	return k
}

func TestStoreConformanceNames(t *testing.T) {
	forStores(t, stores(t), func(t *testing.T, s clockStore) {
		a := []core.Policy{policyOf(t, "a", core.PerMinute(1))}
		b := []core.Policy{policyOf(t, "b", core.PerMinute(1))}
		for _, c := range []struct {
			p     []core.Policy
			allow bool
		}{{a, true}, {a, false}, {b, true}, {b, false}} {
			got, err := core.Take(context.Background(), s.store, "k", 1, c.p, nil)
			if err != nil || got.Allowed != c.allow {
				t.Fatalf("policy %s: got %v %v, want allowed=%v", c.p[0].Name, got.Allowed, err, c.allow)
			}
		}
	})
}

// secondAndHour is the policies 2 a second and 3 an hour.
func secondAndHour(t *testing.T) []core.Policy {
	t.Helper()
	ps, err := core.Policies(
		core.NamedLimit{Name: "second", Limit: core.PerSecond(2)},
		core.NamedLimit{Name: "hour", Limit: core.PerHour(3)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestStoreConformanceMultiPolicy(t *testing.T) {
	forStores(t, stores(t), func(t *testing.T, s clockStore) {
		ps := secondAndHour(t)
		each := make([]core.Outcome, 2)
		ctx := context.Background()
		// Two allowed: the second-limit binds on the 2nd call (0 left vs 1).
		for i, wantRem := range []int64{1, 0} {
			got, err := core.Take(ctx, s.store, "k", 1, ps, each)
			if err != nil || !got.Allowed || got.Remaining != wantRem {
				t.Fatalf("call %d: got %+v %v", i, got, err)
			}
		}
		if each[1].Remaining != 1 {
			t.Errorf("hour remaining %d, want 1", each[1].Remaining)
		}
		// Denied by "second": all-or-nothing, the hour bucket keeps its token.
		got, err := core.Take(ctx, s.store, "k", 1, ps, each)
		if err != nil || got.Allowed || got.Policy != 0 || each[1].Remaining != 1 {
			t.Fatalf("third call: got %+v each %+v %v", got, each, err)
		}
		if s.realTime {
			return
		}
		s.advance(time.Second)
		got, _ = core.Take(ctx, s.store, "k", 1, ps, each)
		if !got.Allowed || got.Policy != 1 || got.Remaining != 0 {
			t.Fatalf("after 1s: got %+v, want allowed, bound by hour with 0 left", got)
		}
		got, _ = core.Take(ctx, s.store, "k", 1, ps, each)
		// The hour bucket refilled 1s worth (1/1200 token) before the
		// last token went: the next is 20m - 1s away.
		if got.Allowed || got.Policy != 1 || got.RetryAfter != 20*time.Minute-time.Second {
			t.Fatalf("hour exhausted: got %+v, want denied by hour, retry 19m59s", got)
		}
	})
}
