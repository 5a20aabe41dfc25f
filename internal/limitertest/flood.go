package limitertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Flood is a load on one key, as the exactness tests run it: Goroutines
// goroutines per limiter, each deciding Key in a loop, Each times or, when
// Each is 0, until For has passed since the flood began, pausing Pause
// after each decision (0: none).
type Flood struct {
	Key        string
	Goroutines int           // per limiter
	Each       int           // decisions per goroutine; 0: For decides
	For        time.Duration // how long each goroutine decides, when Each is 0
	Pause      time.Duration // between two decisions of a goroutine
}

// Counts is what a flood's decisions were.
type Counts struct {
	// Admitted and Denied count every decision, degraded or not: a
	// degraded decision that FailOpen admitted is admitted all the same
	// (nothing else bounds it). Degraded counts those FailMode made.
	Admitted, Denied, Degraded int64
	// Elapsed is Δ, from before the first decision was asked to after the
	// last answer: every decision the store made lies within it.
	Elapsed time.Duration
}

// Decisions returns how many decisions there were.
func (c Counts) Decisions() int64 { return c.Admitted + c.Denied }

// Run floods the limiters ls with f and returns what they decided. A
// decision that returns an error fails the test (t.Error) and ends its
// goroutine.
func (f Flood) Run(t testing.TB, ls ...*core.Limiter) Counts {
	t.Helper()
	var mu sync.Mutex
	var c Counts
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range ls {
		for range f.Goroutines {
			wg.Go(func() {
				var mine Counts
				defer func() {
					mu.Lock()
					c.Admitted, c.Denied, c.Degraded = c.Admitted+mine.Admitted, c.Denied+mine.Denied, c.Degraded+mine.Degraded
					mu.Unlock()
				}()
				for i := 0; f.more(i, start); i++ {
					res, err := l.Allow(context.Background(), f.Key)
					if err != nil {
						t.Error(err)
						return
					}
					mine.count(res)
					if f.Pause > 0 {
						time.Sleep(f.Pause)
					}
				}
			})
		}
	}
	wg.Wait()
	c.Elapsed = time.Since(start)
	return c
}

// more reports whether a goroutine that made i decisions of a flood begun
// at start makes another.
func (f Flood) more(i int, start time.Time) bool {
	if f.Each > 0 {
		return i < f.Each
	}
	return time.Since(start) < f.For
}

// count adds the decision res.
func (c *Counts) count(res core.Result) {
	if res.Allowed {
		c.Admitted++
	} else {
		c.Denied++
	}
	if res.Degraded {
		c.Degraded++
	}
}

// Bound is C + R·Δ: the most lim admits in d from a full bucket, the
// refill rounded down.
func Bound(lim core.Limit, d time.Duration) int64 {
	return int64(lim.Capacity()) + int64(float64(lim.Rate)*d.Seconds()/lim.Period.Seconds())
}
