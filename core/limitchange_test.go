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
