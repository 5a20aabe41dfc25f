// Package limitertest holds what the test suites share (core's external
// tests, nethttp, the router adapters, metrics, grpc, otel and the HTTP
// conformance suite): clocks a test moves by hand, limiters on a memory
// store of their own reading them, a store that cannot decide, and what
// the adapters' tests and benchmarks serve through. Time is an input, so
// tests using these run in parallel and never sleep. Flood is the
// exception: the exactness tests' load on one key, on the real clock,
// counted against C + R·Δ (Bound).
//
// It imports the standard library and core only: the library packages'
// tests may use nothing else. core's internal tests (package core) cannot
// import it.
package limitertest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
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

// Timeout is New's default Config.Timeout: a loaded 2-CPU machine under
// the race detector is never a refusal. A test whose subject is latency
// (a stall, a slow Redis, the default itself) sets Timeout.
const Timeout = 5 * time.Second

// New returns core.New(cfg), with cfg.Logger Quiet when it is nil and
// cfg.Timeout Timeout when it is zero, and fails the test if core.New
// refuses cfg.
func New(t testing.TB, cfg core.Config) *core.Limiter {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = Quiet
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = Timeout
	}
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

// ConstantKey is a key function giving every request the key "client-1".
func ConstantKey(*http.Request) (string, error) { return "client-1", nil }

// DiscardWriter is a ResponseWriter that keeps only its header map, reused
// across requests so that a benchmark measures the router and the
// middleware, not the recorder.
type DiscardWriter struct{ H http.Header }

// NewDiscardWriter returns a DiscardWriter with an empty header map.
func NewDiscardWriter() *DiscardWriter { return &DiscardWriter{H: make(http.Header, 8)} }

// Header returns the header map.
func (w *DiscardWriter) Header() http.Header { return w.H }

// Write discards b.
func (w *DiscardWriter) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader discards the status.
func (w *DiscardWriter) WriteHeader(int) {}

// Get serves h a GET of target from 192.0.2.1:1234 with the header fields
// hdr (name, value pairs) and returns the response recorded.
func Get(h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// ErrDown is the error of every DownStore decision: a dial error naming an
// internal address, which no response may carry.
var ErrDown = errors.New("dial tcp 10.1.2.3:6379: connection refused")

// DownStore is a core.Store that cannot decide: every call fails with
// ErrDown. It counts the calls. Make one with NewDownStore.
type DownStore struct {
	core.Store // nil: it is a stand-in (internal/standin), never called
	calls      atomic.Int64
}

// NewDownStore returns a DownStore.
func NewDownStore() *DownStore { return new(DownStore) }

// Answer fails every call (see internal/standin).
func (s *DownStore) Answer(context.Context, bucket.Ask) (bucket.Outcome, bool, error) {
	s.calls.Add(1)
	return bucket.Outcome{}, false, ErrDown
}

// Calls returns how many calls the store failed.
func (s *DownStore) Calls() int64 { return s.calls.Load() }
