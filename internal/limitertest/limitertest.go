// Package limitertest holds what the tests of nethttp, the router adapters
// and the HTTP conformance suite share: clocks a test moves by hand and
// limiters on a memory store of their own reading them. Time is an input,
// so tests using these run in parallel and never sleep.
//
// It imports the standard library and core only: the library packages'
// tests may use nothing else.
package limitertest

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Epoch is where every clock of this package starts: 2026-01-01 00:00 UTC,
// Unix 1767225600.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a clock a test moves by hand, safe for concurrent use. Its zero
// value reads the zero time; NewClock starts at Epoch.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at Epoch.
func NewClock() *Clock { return &Clock{t: Epoch} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Stepping returns a clock that moves a second forward on every read,
// starting a second after Epoch: a PerSecond(n) bucket is full before every
// decision, so every request is allowed, with small numbers in the header
// fields. Benchmarks of the allowed path use it.
func Stepping() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return Epoch.Add(time.Duration(n.Add(1)) * time.Second) }
}

// Quiet is a logger that writes nothing.
var Quiet = slog.New(slog.DiscardHandler)

// New returns core.New(cfg) with cfg.Logger set to Quiet, and fails the
// test if core.New refuses cfg.
func New(t testing.TB, cfg core.Config) *core.Limiter {
	t.Helper()
	cfg.Logger = Quiet
	l, err := core.New(cfg)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	return l
}

// NewLimiter returns a FailOpen limiter of lim on a memory store of its own
// whose clock stands at Epoch. It is shorthand for
// NewLimiterClock(t, lim, func() time.Time { return Epoch }).
func NewLimiter(t testing.TB, lim core.Limit) *core.Limiter {
	t.Helper()
	return NewLimiterClock(t, lim, func() time.Time { return Epoch })
}

// NewLimiterClock returns a FailOpen limiter of lim on a memory store of
// its own reading now.
func NewLimiterClock(t testing.TB, lim core.Limit, now func() time.Time) *core.Limiter {
	t.Helper()
	return New(t, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(now)),
		Limit:    lim,
		FailMode: core.FailOpen,
	})
}
