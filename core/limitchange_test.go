package core_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestLimitChangeSharedBound: two instances, one Name, limits ten times
// apart (the rates of 6000/min and 600/min, bursts of 5s), decide one
// key at once: the generous one
// as fast as it can for 20ms in every 150ms, the other every 2ms (so it
// takes between the generous one's bursts). Each decides by its own
// limit, and what they admit together stays within the generous limit's
// bound (DESIGN §3, "Limits that change"): every interval Δ admits at
// most C + R·Δ, and the lower instance alone at most its own C + R·Δ.
// The lower one reads a bucket whose spend it cannot represent (more
// than its capacity): what it writes must not forget that spend.
func TestLimitChangeSharedBound(t *testing.T) {
	hi := core.Limit{Rate: 100, Period: time.Second, Burst: 500}
	lo := core.Limit{Rate: 10, Period: time.Second, Burst: 50}
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			store := core.Store(core.NewMemoryStore())
			if name == "redis" {
				if testing.Short() {
					t.Skip("real Redis: skipped with -short")
				}
				c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), PoolSize: 4})
				t.Cleanup(func() { c.Close() })
				store = core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
			}
			sharedBound(t, store, hi, lo)
		})
	}
}

func sharedBound(t *testing.T, store core.Store, hi, lo core.Limit) {
	limiter := func(lim core.Limit) *core.Limiter {
		return limitertest.New(t, core.Config{Store: store, Limit: lim, Name: "api",
			FailMode: core.FailClosed, Timeout: 5 * time.Second})
	}
	lh, ll := limiter(hi), limiter(lo)
	var mu sync.Mutex
	var all, low []admission
	var failed int
	decide := func(l *core.Limiter, isLow bool) {
		a := time.Now()
		res, err := l.Allow(context.Background(), "k")
		b := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil || res.Degraded:
			failed++
		case res.Allowed:
			all = append(all, admission{a, b, 1})
			if isLow {
				low = append(low, admission{a, b, 1})
			}
		}
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(1300 * time.Millisecond)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g == 0 && time.Now().Before(stop) {
				decide(ll, true)
				time.Sleep(2 * time.Millisecond)
			}
			for g > 0 && time.Now().Before(stop) {
				for burst := time.Now().Add(20 * time.Millisecond); time.Now().Before(burst); {
					decide(lh, false)
				}
				time.Sleep(130 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if failed != 0 {
		t.Errorf("%d decisions failed or degraded", failed)
	}
	wa, atA := overBound(all, hi.Burst, hi)
	wl, atL := overBound(low, lo.Burst, lo)
	t.Logf("%v and %v on one key: %d admitted, %d by %v; worst window %d over C + R·Δ of %v (%s), %d over its own for %v (%s)",
		hi, lo, len(all), len(low), lo, wa, hi, atA, wl, lo, atL)
	if wa > 0 {
		t.Errorf("together: a window over %v's C + R·Δ by %d (%s)", hi, wa, atA)
	}
	if wl > 0 {
		t.Errorf("%v alone: a window over its C + R·Δ by %d (%s)", lo, wl, atL)
	}
	if len(low) == 0 {
		t.Errorf("%v admitted nothing: it must refill at its own rate", lo)
	}
}

// overBound returns by how much the worst interval of adm exceeds
// capacity + R·Δ under lim (whole ticks of refill, and one for a tick
// boundary inside), and what it admitted.
func overBound(adm []admission, capacity int, lim core.Limit) (worst int, at string) {
	sort.Slice(adm, func(i, j int) bool { return adm[i].lo.Before(adm[j].lo) })
	worst = -1 << 62
	for i := range adm {
		var hi time.Time
		sum := 0
		for j := i; j < len(adm); j++ {
			sum += adm[j].n
			if adm[j].hi.After(hi) {
				hi = adm[j].hi
			}
			refill := int(int64(lim.Rate)*int64(hi.Sub(adm[i].lo))/int64(lim.Period)) + 1
			if o := sum - capacity - refill; o > worst {
				worst, at = o, fmt.Sprintf("%d admitted in %v", sum, hi.Sub(adm[i].lo))
			}
		}
	}
	return worst, at
}

// TestLimitChangeWaitingBound: 100/min spends its 100 tokens; 10s later
// the lower 60/min (same Name) reserves, charges, refunds, reserves and
// cancels, pauses (then 2s pass) or borrows a slice (Config.Borrow), and
// 100/min then takes all it can (and 60/min what its slice holds). Whatever
// the lower limit wrote from its clamped reading must keep the spend
// beyond its capacity: together they admit at most C + R·Δ of 100/min
// (DESIGN §3), 117 in 10s (120 in 12s), not 150 as when the lower
// limit wrote its clamp in its own terms.
func TestLimitChangeWaitingBound(t *testing.T) {
	hi, lo := core.PerMinute(100), core.PerMinute(60)
	all := stores(t)
	some := map[string]func(t *testing.T) clockStore{"memory": all["memory"], "miniredis": all["miniredis"], "redis": all["redis"]}
	for _, op := range []string{"reserve", "charge", "refund", "cancel", "pause", "borrow"} {
		t.Run(op, func(t *testing.T) {
			forStores(t, some, func(t *testing.T, s clockStore) {
				admitted, elapsed := waitingAfterClamp(t, s, hi, lo, op)
				bound := int(limitertest.Bound(hi, elapsed)) + 1 // and a tick boundary inside
				t.Logf("%s under %v after %v spent all: %d admitted in %v, bound %d", op, lo, hi, admitted, elapsed.Round(time.Millisecond), bound)
				if admitted > bound {
					t.Errorf("%d admitted in %v: over %v's C + R·Δ (%d)", admitted, elapsed.Round(time.Millisecond), hi, bound)
				}
			})
		})
	}
}

// waitingAfterClamp runs TestLimitChangeWaitingBound's op on s, and
// returns the tokens admitted and the time they took (on s's clock).
func waitingAfterClamp(t *testing.T, s clockStore, hi, lo core.Limit, op string) (int, time.Duration) {
	cfg := core.Config{Store: s.store, Limit: hi, Name: "api", FailMode: core.FailClosed, MaxWait: 10 * time.Second, Timeout: 5 * time.Second}
	if !s.realTime {
		cfg.DenyCacheSize = -1 // it counts on this process's clock, which the test does not move
	}
	h, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if r, err := h.AllowN(context.Background(), "k", hi.Burst); err != nil || !r.Allowed {
		t.Fatalf("the first burst: %+v %v", r, err)
	}
	s.advance(10 * time.Second)
	cfg.Limit = lo
	n, later := lowerWrites(t, h, cfg, op)
	admitted, passed := hi.Burst+n, 10*time.Second
	if op == "pause" {
		s.advance(2 * time.Second)
		passed += 2 * time.Second
	}
	admitted += drain(t, h)
	if later != nil {
		admitted += drain(t, later) // the slice in hand, and what it reads
	}
	if s.realTime {
		passed += time.Since(start) // the server's clock moved too
	}
	return admitted, passed
}

// lowerWrites runs op under cfg.Limit, h's view of it (or, to borrow, a
// limiter of cfg's own, returned): the tokens it admitted (less what it
// gave back).
func lowerWrites(t *testing.T, h *core.Limiter, cfg core.Config, op string) (int, *core.Limiter) {
	ctx := context.Background()
	l, err := h.With(cfg.Limit)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	switch op {
	case "reserve", "cancel":
		n = map[string]int{"reserve": 1, "cancel": 15}[op]
		r, err := l.ReserveN(ctx, "k", n)
		if err != nil || !r.OK() {
			t.Fatalf("ReserveN(%d) under %v: %v %v", n, cfg.Limit, r, err)
		}
		if op == "cancel" {
			n = 0
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
		}
	case "charge":
		n = 1
		_, err = l.Charge(ctx, "k", n)
	case "refund":
		n = -1 // one of the burst given back
		_, err = l.Refund(ctx, "k", 1)
	case "pause":
		_, err = l.Pause(ctx, "k", time.Second)
	case "borrow":
		// Its second take borrows a slice of 3 (DESIGN §14) and takes 1 of
		// them: the store counts all 3 taken, though 2 are spent later.
		cfg.Borrow = 3 * time.Second
		b, err := core.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if r, err := b.Allow(ctx, "k"); err != nil || !r.Allowed {
				t.Fatalf("a take under %v, borrowing: %+v %v", cfg.Limit, r, err)
			}
		}
		return 2, b
	}
	if err != nil {
		t.Fatal(err)
	}
	return n, nil
}

// drain returns the tokens l admits of "k", one at a time, until it
// refuses (at most 200).
func drain(t *testing.T, l *core.Limiter) int {
	for i := range 200 {
		r, err := l.Allow(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			return i
		}
	}
	return 200
}
