package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// admission is a decision that admitted n tokens, at a time known
// within [lo, hi] on the host's clock (Redis's TIME reads it too): one
// from a slice at once, one by the store somewhere during its call.
type admission struct {
	lo, hi time.Time
	n      int
}

// TestBorrowLimitChange: instances decide one hot key with Borrow on,
// under limit A; then every instance is redeployed under B, same Name
// (its limiter rebuilt), while the slices borrowed under A are out and
// still spent by the instances that hold them. The loans carry to B in
// whole tokens: B's bucket holds at most C_B less the L tokens on loan
// at the change, however it is read. So from the change on, every
// interval Δ admits at most max(C_B, L) + R_B·Δ: B's envelope, its
// capacity raised to the loans already out when they exceed it (a
// lowering below them: those tokens are in hand, spent whatever B says,
// and B's bucket owes them back). Before the change, A's C_A + R_A·Δ.
// The first decisions under B cost the most (C_B/4): the first reads the
// bucket still in A's policy, loans out, as a rolling deploy's does.
func TestBorrowLimitChange(t *testing.T) {
	if testing.Short() {
		t.Skip("real-Redis load test")
	}
	for _, tc := range []struct {
		name string
		a, b core.Limit
	}{
		{"raise", core.Limit{Rate: 200, Period: time.Second, Burst: 400}, core.Limit{Rate: 400, Period: time.Second, Burst: 800}},
		{"rate down, burst up", core.Limit{Rate: 1000, Period: time.Second, Burst: 1600}, core.Limit{Rate: 100, Period: time.Second, Burst: 2000}},
		{"lower", core.Limit{Rate: 400, Period: time.Second, Burst: 800}, core.Limit{Rate: 200, Period: time.Second, Burst: 60}},
		{"rate up, burst down", core.Limit{Rate: 200, Period: time.Second, Burst: 400}, core.Limit{Rate: 5000, Period: time.Second, Burst: 60}},
	} {
		t.Run(tc.name, func(t *testing.T) { borrowLimitChange(t, tc.a, tc.b) })
	}
}

func borrowLimitChange(t *testing.T, a, b core.Limit) {
	const instances, borrow = 4, 200 * time.Millisecond
	addr, prefix := redistest.Addr(t), redistest.Prefix(t)
	type instance struct {
		mu       sync.RWMutex // held for writing while it is redeployed
		old, cur *core.Limiter
		spent    bool // old's slice is spent or its loan ended
		asked    int  // decisions under B: their costs go down from C_B/4 to 1, again and again
	}
	obs := new(borrowObserver)
	ins := make([]*instance, instances)
	limiter := func(c *redis.Client, lim core.Limit) *core.Limiter {
		return limitertest.New(t, core.Config{
			Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: lim, Name: "hot",
			FailMode: core.FailClosed, Timeout: 5 * time.Second, Borrow: borrow, Observer: obs,
		})
	}
	clients := make([]*redis.Client, instances)
	for i := range ins {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4})
		t.Cleanup(func() { clients[i].Close() })
		ins[i] = &instance{cur: limiter(clients[i], a)}
	}
	var mu sync.Mutex
	var before, after []admission // in.spent and in.asked: one goroutine per instance
	var change time.Time
	var failed int
	decide := func(in *instance) {
		in.mu.RLock()
		defer in.mu.RUnlock()
		lo := time.Now()
		if in.old != nil && !in.spent {
			if core.TakeFromSlice(in.old, "k", 1) {
				mu.Lock()
				after = append(after, admission{lo, lo, 1})
				mu.Unlock()
				return
			}
			in.spent = true // one goroutine per instance: see below
		}
		n := 1
		if in.old != nil {
			n = max(1, b.Burst/4) - in.asked%max(1, b.Burst/4)
			in.asked++
		}
		res, err := in.cur.AllowN(context.Background(), "k", n)
		hi := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil || res.Degraded:
			failed++
		case !res.Allowed:
		case in.old == nil:
			before = append(before, admission{lo, hi, n})
		default:
			after = append(after, admission{lo, hi, n})
		}
	}
	run := func(d, pause time.Duration) {
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for _, in := range ins {
			wg.Add(1)
			go func() { // one goroutine per instance: in.spent needs no lock
				defer wg.Done()
				for time.Now().Before(stop) {
					decide(in)
					time.Sleep(pause)
				}
			}()
		}
		wg.Wait()
	}
	// Under A, each instance decides five times a loan (a hot key, its
	// slices far from spent), asking for at most half A's rate: the
	// bucket has room, so slices are lent; under B, as fast as they can.
	start := time.Now()
	run(300*time.Millisecond, borrow/5)
	// A pause, far shorter than the loans: B's first read refills from a
	// stamp 12ms old, while A's slices are out.
	time.Sleep(12 * time.Millisecond)
	for i, in := range ins {
		in.mu.Lock()
		in.old, in.cur = in.cur, limiter(clients[i], b)
	}
	lent := onLoan(t, clients[0], prefix)
	change = time.Now()
	for _, in := range ins {
		in.mu.Unlock()
	}
	run(300*time.Millisecond, 0)

	if failed != 0 {
		t.Errorf("%d decisions failed or degraded", failed)
	}
	tokens := func(adm []admission) (sum int) {
		for _, x := range adm {
			sum += x.n
		}
		return sum
	}
	wa, atA := overBound(before, a.Burst, a)
	capB := max(b.Burst, lent)
	wb, atB := overBound(after, capB, b)
	fromChange := int(int64(b.Rate)*int64(time.Since(change))/int64(b.Period)) + capB + 1
	t.Logf("A %v: %d admitted in %v, worst window %d over C_A + R_A·Δ (%s); B %v from the change (%d tokens on loan then): %d admitted (bound max(C_B, L) + R_B·Δ = %d), worst window %d over (%s); from slices %d, from the store %d",
		a, tokens(before), change.Sub(start).Round(time.Millisecond), wa, atA, b, lent, tokens(after), fromChange, wb, atB, obs.borrowed.Load(), obs.store.Load())
	if wa > 0 {
		t.Errorf("under A: a window over C_A + R_A·Δ by %d (%s)", wa, atA)
	}
	if wb > 0 {
		t.Errorf("from the change: a window over max(C_B, L) + R_B·Δ by %d (%s)", wb, atB)
	}
	if lent < instances*2 {
		t.Error("no slice was out at the change: the test shows nothing")
	}
}

// onLoan is the tokens on loan in the buckets under prefix, as the store
// records them: each bucket's value ends with ";<id>,<tokens>,<end µs>"
// per loan, one that ended by now (Redis's clock) no longer out.
func onLoan(t *testing.T, c *redis.Client, prefix string) int {
	t.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	lent := 0
	for _, k := range keys {
		v, _ := c.Get(ctx, k).Result()
		for _, loan := range strings.Split(v, ";")[1:] {
			var id string
			var tokens, end int64
			if _, err := fmt.Sscanf(strings.ReplaceAll(loan, ",", " "), "%s %d %d", &id, &tokens, &end); err != nil {
				t.Fatalf("bucket %s: loan %q: %v", k, loan, err)
			}
			if end > now.UnixMicro() {
				lent += int(tokens)
			}
		}
	}
	return lent
}
