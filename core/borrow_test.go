package core_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// borrowObserver counts decisions answered from slices, and the tokens
// borrowed and returned.
type borrowObserver struct {
	borrowed, lent, returned, store atomic.Int64
}

func (o *borrowObserver) Decision(e core.DecisionEvent) {
	if e.Borrowed {
		o.borrowed.Add(1)
	} else {
		o.store.Add(1)
	}
	o.lent.Add(int64(e.Lent))
	o.returned.Add(int64(e.Returned))
}

func (o *borrowObserver) BreakerChange(string, bool) {}

// TestBorrowNeverOverAdmits (issue 42): instances, each its own client
// and Limiter with Borrow on, race on one key for longer than many
// loans: the cost admitted stays within C + R·Δ, most decisions come
// from slices, and nothing is degraded. Without the store keeping the
// loans out of its refill (a loan's tokens refilled at once), every
// instance would admit its slices beyond the envelope.
func TestBorrowNeverOverAdmits(t *testing.T) {
	if testing.Short() {
		t.Skip("real-Redis load test")
	}
	for _, instances := range []int{1, 8, 24} {
		t.Run("instances="+strconv.Itoa(instances), func(t *testing.T) { borrowExactness(t, instances) })
	}
}

func borrowExactness(t *testing.T, instances int) {
	lim := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
	obs := new(borrowObserver)
	ls := appInstances(t, instances, redistest.Prefix(t), core.Config{
		Limit: lim, Name: "hot", FailMode: core.FailClosed, Timeout: 5 * time.Second, Borrow: 50 * time.Millisecond, Observer: obs,
	}, pooled(redistest.Addr(t), 4))
	c := limitertest.Flood{Key: "k", Goroutines: 2, For: 600 * time.Millisecond}.Run(t, ls...)
	bound := limitertest.Bound(lim, c.Elapsed) + 1
	t.Logf("%d instances, %v: admitted %d (bound C + R·Δ = %d), denied %d, degraded %d; from slices %d, from the store %d; tokens lent %d, returned %d",
		instances, c.Elapsed.Round(time.Millisecond), c.Admitted, bound, c.Denied, c.Degraded,
		obs.borrowed.Load(), obs.store.Load(), obs.lent.Load(), obs.returned.Load())
	if c.Degraded != 0 {
		t.Errorf("%d decisions degraded", c.Degraded)
	}
	if c.Admitted > bound {
		t.Errorf("admitted %d > C + R·Δ = %d: over-admission", c.Admitted, bound)
	}
	if obs.borrowed.Load() == 0 {
		t.Errorf("no decision came from a slice")
	}
}

// borrowRig is a limiter with Borrow on a miniredis whose clock, and the
// limiter's, move only by hand, together.
type borrowRig struct {
	m       *miniredis.Miniredis
	now     time.Duration
	advance func(time.Duration)
	obs     *borrowObserver
	store   *core.RedisStore
}

func newBorrowRig(t *testing.T) *borrowRig {
	r := &borrowRig{m: miniredis.RunT(t), obs: new(borrowObserver)}
	epoch := time.Unix(1_700_000_000, 0)
	r.m.SetTime(epoch)
	r.advance = func(d time.Duration) { r.now += d; r.m.SetTime(epoch.Add(r.now)) }
	return r
}

func (r *borrowRig) limiter(t *testing.T, cfg core.Config) *core.Limiter {
	if r.store == nil { // one store: AllowAll needs it
		c := redis.NewClient(&redis.Options{Addr: r.m.Addr()})
		t.Cleanup(func() { c.Close() })
		r.store = core.NewRedisStore(c)
	}
	cfg.Store, cfg.Observer = r.store, r.obs
	cfg.FailMode, cfg.Timeout = core.FailClosed, 5*time.Second
	l := limitertest.New(t, cfg)
	core.SetClock(l, func() time.Duration { return r.now })
	return l
}

// TestBorrowHotKeyFromSlices: a hot allowed key is decided in process:
// 2000 decisions under two limits cost two store decisions and one
// borrow; Remaining counts down from the bucket's level as the store's
// would, and the store keeps both limits' loans.
func TestBorrowHotKeyFromSlices(t *testing.T) {
	rig := newBorrowRig(t)
	l := rig.limiter(t, core.Config{Limit: core.PerSecond(100_000), Name: "big", Borrow: time.Second,
		Extra: []core.NamedLimit{{Name: "big2", Limit: core.PerSecond(50_000)}}})
	ctx := context.Background()
	for i := range 2000 {
		res, err := l.Allow(ctx, "k")
		if err != nil || !res.Allowed || res.Degraded {
			t.Fatalf("decision %d: %+v, %v", i, res, err)
		}
		if want := 50_000 - 1 - i; res.Remaining != want || res.Name != "big2" || len(res.Policies) != 2 {
			t.Fatalf("decision %d: Remaining %d of %s, want %d of big2 (%+v)", i, res.Remaining, res.Name, want, res)
		}
	}
	if got := rig.obs.store.Load(); got != 1 {
		t.Errorf("%d decisions by the store, want 1 (the key's first)", got)
	}
	if got, lent := rig.obs.borrowed.Load(), rig.obs.lent.Load(); got != 1999 || lent != 25_000 {
		t.Errorf("from slices %d, lent %d; want 1999 from one slice of 25000 (half the smaller burst)", got, lent)
	}
	for _, name := range []string{"big", "big2"} {
		if v, _ := rig.m.Get(rig.store.Key(name, "k")); !strings.Contains(v, ",25000,") {
			t.Errorf("bucket %s = %q: no loan of 25000", name, v)
		}
	}
}

// TestBorrowExactNearEmpty: near empty the store lends nothing, and the
// key's decisions go to the store one by one: every answer — allowed or
// not, Remaining, RetryAfter — is the one a limiter without Borrow gives
// on a twin key.
func TestBorrowExactNearEmpty(t *testing.T) {
	rig := newBorrowRig(t)
	lim := core.PerMinute(10)
	plain := rig.limiter(t, core.Config{Limit: lim, Name: "plain"})
	hot := rig.limiter(t, core.Config{Limit: lim, Name: "hot", Borrow: time.Minute})
	ctx := context.Background()
	for i := range 14 {
		if i == 12 {
			rig.advance(6 * time.Second) // one token back
		}
		want, _ := plain.Allow(ctx, "k")
		got, _ := hot.Allow(ctx, "k")
		want.Limit, want.Name = got.Limit, got.Name
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decision %d: with Borrow %+v, without %+v", i, got, want)
		}
	}
	if rig.obs.borrowed.Load() == 0 {
		t.Fatal("no decision came from a slice: the test shows nothing")
	}
}

// TestBorrowOutage: a slice in hand serves while the store is down,
// until its loan ends for this instance; then FailMode decides.
func TestBorrowOutage(t *testing.T) {
	rig := newBorrowRig(t)
	l := rig.limiter(t, core.Config{Limit: core.PerSecond(1000), Name: "o", Borrow: 100 * time.Millisecond})
	ctx := context.Background()
	for range 2 { // the second borrows a slice of 100
		if res, _ := l.Allow(ctx, "k"); !res.Allowed {
			t.Fatalf("before the outage: %+v", res)
		}
	}
	rig.m.SetError("LOADING down for the test")
	for i := range 50 {
		rig.advance(time.Millisecond)
		if res, _ := l.Allow(ctx, "k"); !res.Allowed || res.Degraded {
			t.Fatalf("decision %d from the slice during the outage: %+v", i, res)
		}
	}
	rig.advance(50 * time.Millisecond) // past the loan's end
	if res, _ := l.Allow(ctx, "k"); res.Allowed || !res.Degraded {
		t.Fatalf("after the loan's end: %+v, want FailClosed's denial", res)
	}
}

// TestBorrowLostReply: a borrow whose reply is lost (the script ran,
// the reply came after Timeout) degrades that decision alone; the key's
// next decision borrows again, giving the lost loan back whole, so the
// bucket records one loan, and decisions come from the new slice.
func TestBorrowLostReply(t *testing.T) {
	rig := newBorrowRig(t)
	proxy := faultproxy.Start(t, rig.m.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { c.Close() })
	store := core.NewRedisStore(c)
	l := limitertest.New(t, core.Config{Store: store, Limit: core.PerSecond(1000), Name: "lost",
		Borrow: 100 * time.Millisecond, FailMode: core.FailClosed, Timeout: 200 * time.Millisecond, Observer: rig.obs})
	core.SetClock(l, func() time.Duration { return rig.now })
	ctx := context.Background()
	if res, _ := l.Allow(ctx, "k"); !res.Allowed || res.Degraded { // the key is seen
		t.Fatalf("first decision: %+v", res)
	}
	rig.advance(time.Millisecond)
	proxy.SetLatency(time.Second)
	if res, _ := l.Allow(ctx, "k"); !res.Degraded {
		t.Fatalf("the borrow whose reply is late: %+v, want degraded", res)
	}
	proxy.SetLatency(0)
	loans := func() int {
		v, _ := rig.m.Get(store.Key("lost", "k"))
		return strings.Count(v, ";")
	}
	if loans() != 1 {
		t.Fatalf("the store records %d loans, want the one whose reply was lost", loans())
	}
	rig.advance(time.Millisecond)
	for i := range 10 {
		if res, _ := l.Allow(ctx, "k"); !res.Allowed || res.Degraded {
			t.Fatalf("decision %d after the lost reply: %+v", i, res)
		}
	}
	if got := loans(); got != 1 || rig.obs.returned.Load() != 100 || rig.obs.borrowed.Load() != 10 {
		t.Fatalf("after the next borrow: %d loans recorded, %d tokens returned, %d decisions from slices; want 1, 100, 10",
			got, rig.obs.returned.Load(), rig.obs.borrowed.Load())
	}
}

// TestBorrowZeroUnchanged: with Borrow 0 no decision comes from a slice
// and no bucket records a loan.
func TestBorrowZeroUnchanged(t *testing.T) {
	rig := newBorrowRig(t)
	l := rig.limiter(t, core.Config{Limit: core.PerSecond(1000), Name: "z"})
	for range 100 {
		if res, _ := l.Allow(context.Background(), "k"); !res.Allowed {
			t.Fatalf("denied: %+v", res)
		}
	}
	if v, _ := rig.m.Get(rig.store.Key("z", "k")); rig.obs.borrowed.Load() != 0 || strings.Contains(v, ";") {
		t.Fatalf("Borrow 0: %d from slices, bucket %q", rig.obs.borrowed.Load(), v)
	}
}

// TestBorrowOnCluster: on a Redis Cluster, hot keys of several nodes,
// under two limits, are decided from slices borrowed in the node
// batches, within C + R·Δ, none degraded.
func TestBorrowOnCluster(t *testing.T) {
	cluster := startCluster(t)
	prefix := redistest.Prefix(t)
	lim := core.Limit{Rate: 400, Period: time.Second, Burst: 100}
	obs := new(borrowObserver)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var limiters []*core.Limiter
	for range 4 {
		limiters = append(limiters, limitertest.New(t, core.Config{
			Store: core.NewRedisStore(cluster.Client(), core.WithPrefix(prefix)), Limit: lim, Name: "hot",
			Extra:    []core.NamedLimit{{Name: "hot-min", Limit: core.PerMinute(100_000)}},
			FailMode: core.FailClosed, Timeout: 5 * time.Second, Borrow: 50 * time.Millisecond, Observer: obs,
		}))
	}
	counts := make([]limitertest.Counts, len(keys))
	var wg sync.WaitGroup
	for k, key := range keys {
		wg.Go(func() {
			counts[k] = limitertest.Flood{Key: key, Goroutines: 1, For: 500 * time.Millisecond}.Run(t, limiters...)
		})
	}
	wg.Wait()
	var degraded int64
	var elapsed time.Duration
	for k, c := range counts {
		degraded, elapsed = degraded+c.Degraded, max(elapsed, c.Elapsed)
		if bound := limitertest.Bound(lim, c.Elapsed) + 1; c.Admitted > bound {
			t.Errorf("key %s: admitted %d > C + R·Δ = %d", keys[k], c.Admitted, bound)
		}
	}
	t.Logf("%v: from slices %d, from the store %d, tokens lent %d; degraded %d; bound per key %d", elapsed.Round(time.Millisecond),
		obs.borrowed.Load(), obs.store.Load(), obs.lent.Load(), degraded, limitertest.Bound(lim, elapsed)+1)
	if degraded != 0 || obs.borrowed.Load() == 0 {
		t.Errorf("degraded %d, from slices %d: want none degraded, some from slices", degraded, obs.borrowed.Load())
	}
}

// TestBorrowAllowAll: in AllowAll, a check whose limiter holds a slice of
// its key takes from it in process, the others go to the store; when the
// store refuses them, the slice gets its tokens back (all or nothing).
func TestBorrowAllowAll(t *testing.T) {
	rig := newBorrowRig(t)
	hot := rig.limiter(t, core.Config{Limit: core.PerSecond(1000), Name: "global", Borrow: time.Second})
	tenant := rig.limiter(t, core.Config{Limit: core.PerMinute(2), Name: "tenant"})
	ctx := context.Background()
	for range 2 { // the second borrows
		hot.Allow(ctx, "*")
	}
	before := rig.obs.borrowed.Load()
	var last core.Result
	for i := range 3 {
		first, res, err := core.AllowAll(ctx, core.Check{Limiter: hot, Key: "*", N: 1}, core.Check{Limiter: tenant, Key: "t", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; first.Allowed != want || res[0].Allowed != true || res[1].Allowed != want {
			t.Fatalf("AllowAll %d: %+v, %+v; want allowed %v", i, first, res, want)
		}
		if i == 2 && res[0].Remaining != last.Remaining {
			t.Errorf("refused: the global check says %d left, want %d (its slice untouched)", res[0].Remaining, last.Remaining)
		}
		if i < 2 && res[0].Remaining != 1000-3-i {
			t.Errorf("AllowAll %d: global check %d left, want %d", i, res[0].Remaining, 1000-3-i)
		}
		last = res[0]
	}
	if got := rig.obs.borrowed.Load() - before; got != 3 {
		t.Errorf("%d checks decided from the slice, want 3", got)
	}
	if res, _ := hot.Allow(ctx, "*"); res.Remaining != 1000-5 {
		t.Errorf("next take from the slice: %d left, want %d (the refused check gave its token back)", res.Remaining, 1000-5)
	}
}
