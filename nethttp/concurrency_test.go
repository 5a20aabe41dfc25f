package nethttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// newConcurrency returns a Concurrency of max slots on a MemoryStore
// reading now.
func newConcurrency(t testing.TB, max int, now func() time.Time) *core.Concurrency {
	t.Helper()
	c, err := core.NewConcurrency(core.ConcurrencyConfig{
		Store: core.NewMemoryStore(core.WithClock(now)), Name: "exports", Max: max,
		Lease: 30 * time.Second, FailMode: core.FailClosed,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// holding serves one request through h whose handler stays in until the
// returned function is called; that function returns its response.
func holding(t *testing.T, mw func(http.Handler) http.Handler) (release func() *httptest.ResponseRecorder) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	done := make(chan *httptest.ResponseRecorder)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(in)
		<-out
		_, _ = io.WriteString(w, "ok")
	}))
	go func() { done <- limitertest.Get(h, "/") }()
	<-in
	return func() *httptest.ResponseRecorder { close(out); return <-done }
}

func TestConcurrencyRefusesWhenFull(t *testing.T) {
	t.Parallel()
	mw := Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now))
	h := mw(okHandler)
	finish := holding(t, mw)

	w := limitertest.Get(h, "/")
	// Slots, not a rate: no RateLimit-Policy reading "1 per 30 s", and a
	// Retry-After of a second, not the 30 s Lease (issue 36 item 10).
	const body = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests in flight; retry in 1 second"}`
	if w.Code != http.StatusTooManyRequests || w.Body.String() != body {
		t.Fatalf("while the slot is held: %d %s, want 429 %s", w.Code, w.Body, body)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": problem, "X-Content-Type-Options": "nosniff", "Retry-After": "1",
		"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "1",
	})

	w = finish()
	if w.Code != http.StatusOK {
		t.Fatalf("holder: %d, want 200", w.Code)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": "*", "Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "30",
	})
	for i := range 3 {
		if w := limitertest.Get(h, "/"); w.Code != http.StatusOK {
			t.Fatalf("request %d after the holder finished: %d, want 200", i, w.Code)
		}
	}
}

func TestConcurrencyReleasesOnPanic(t *testing.T) {
	t.Parallel()
	mw := Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now))
	panicky := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic did not propagate")
			}
		}()
		limitertest.Get(panicky, "/")
	}()
	if w := limitertest.Get(mw(okHandler), "/"); w.Code != http.StatusOK {
		t.Fatalf("after a panicking handler: %d, want 200 (slot released)", w.Code)
	}
}

func TestConcurrencyReleasesWhenClientGone(t *testing.T) {
	t.Parallel()
	mw := Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now))
	ctx, cancel := context.WithCancel(context.Background())
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the client hangs up
		<-r.Context().Done()
	}))
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	h.ServeHTTP(httptest.NewRecorder(), r)
	if w := limitertest.Get(mw(okHandler), "/"); w.Code != http.StatusOK {
		t.Fatalf("after a client went away: %d, want 200 (slot released)", w.Code)
	}
}

// TestConcurrencyRenewsLongRequest: a handler running for several Leases
// keeps its slot (real time: the renewal goroutine ticks every Lease/3;
// a Lease of 600 ms lets a loaded machine run a tick 400 ms late).
func TestConcurrencyRenewsLongRequest(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "long", Max: 1, Lease: lease, FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	mw := Concurrency(c)
	finish := holding(t, mw)
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 10) {
		if w := limitertest.Get(mw(okHandler), "/"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("%v into a long request: %d, want 429 (slot kept by renewal)", 3*lease-time.Until(end), w.Code)
		}
	}
	finish()
	if w := limitertest.Get(mw(okHandler), "/"); w.Code != http.StatusOK {
		t.Fatalf("after the long request: %d, want 200", w.Code)
	}
}

// TestConcurrencyKeyErrorsAsGate: key errors, skips and dry-run behave as
// the rate-limit Gate's.
func TestConcurrencyKeyErrorsAsGate(t *testing.T) {
	t.Parallel()
	badKey := WithKey(func(*http.Request) (string, error) { return "", errors.New("no API key") })
	emptyKey := WithKey(func(*http.Request) (string, error) { return "", nil })
	for name, opt := range map[string]Option{"key error": badKey, "empty key": emptyKey} {
		want := limitertest.Get(Middleware(limitertest.NewLimiter(t, core.PerMinute(1)), opt, WithLogger(limitertest.Quiet))(okHandler), "/")
		got := limitertest.Get(Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now), opt, WithLogger(limitertest.Quiet))(okHandler), "/")
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Errorf("%s: %d %s, want the Gate's %d %s", name, got.Code, got.Body, want.Code, want.Body)
		}
	}

	c := newConcurrency(t, 1, limitertest.NewClock().Now)
	skip := Concurrency(c, WithSkip(func(*http.Request) bool { return true }))
	finish := holding(t, Concurrency(c))
	defer finish()
	if w := limitertest.Get(skip(okHandler), "/"); w.Code != http.StatusOK || len(rateLimitFields(w.Header())) != 0 {
		t.Fatalf("skipped: %d %v, want 200 without fields", w.Code, w.Header())
	}
	var seen []bool
	dry := Concurrency(c, WithDryRun(), WithObserver(func(_ *http.Request, res core.Result, _ error, dryRun bool) {
		seen = append(seen, res.Allowed, dryRun)
	}))
	if w := limitertest.Get(dry(okHandler), "/"); w.Code != http.StatusOK || w.Header().Get("Retry-After") != "" || w.Header().Get("Ratelimit-Remaining") != "0" {
		t.Fatalf("dry-run while full: %d %v, want 200 with fields, no Retry-After", w.Code, w.Header())
	}
	if len(seen) != 2 || seen[0] || !seen[1] {
		t.Fatalf("observer saw %v, want [allowed=false dryRun=true]", seen)
	}
}

// TestConcurrencyFailClosed: with the store down, FailClosed refuses with
// 503 and Retry-After, and no rate-limit fields.
func TestConcurrencyFailClosed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "down", Max: 1, FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	w := limitertest.Get(Concurrency(c)(okHandler), "/")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || len(rateLimitFields(w.Header())) != 0 {
		t.Fatalf("store down: %d %v, want 503 with Retry-After and no rate-limit fields", w.Code, w.Header())
	}
}

func TestConcurrencyRefusesTokenOptions(t *testing.T) {
	t.Parallel()
	c := newConcurrency(t, 1, limitertest.NewClock().Now)
	lim := limitertest.NewLimiter(t, core.PerMinute(1))
	for name, opt := range map[string]Option{
		"WithCost":        WithCost(func(*http.Request) int { return 2 }),
		"WithCountIf":     WithCountIf(func(*http.Request, int) bool { return true }),
		"WithLimiterFunc": WithLimiterFunc(func(*http.Request) *core.Limiter { return nil }),
		"WithRoutes":      WithRoutes(map[string]*core.Limiter{"/x": lim}),
		"WithServeMux":    WithServeMux(http.NewServeMux()),
		"WithLimitFunc":   WithLimitFunc(func(*http.Request) (core.Limit, error) { return core.PerMinute(1), nil }),
		"nil":             nil,
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Concurrency accepted %s", name)
				}
			}()
			Concurrency(c, opt)
		})
	}
}

// TestConcurrencyWithRate: a middleware given a Concurrency with a Rate
// sends the rate's header fields; a refusal by either has that one's
// Retry-After, and takes nothing from the other.
func TestConcurrencyWithRate(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(core.WithClock(limitertest.NewClock().Now))
	rate, err := core.New(core.Config{Store: store, Limit: core.PerMinute(3), Name: "exports-rate", FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "exports", Max: 1, Lease: 30 * time.Second, FailMode: core.FailClosed, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	mw := Concurrency(c, WithObserver(func(_ *http.Request, res core.Result, _ error, _ bool) { names = append(names, res.Name) }))
	h := mw(okHandler)
	finish := holding(t, mw) // 1 slot held, 2 tokens left

	w := limitertest.Get(h, "/") // refused by the slot: no token taken
	// The slots' fields and body, not the rate's (issue 36 item 10: it
	// said "rate limit exceeded", Remaining 2 and Retry-After 30).
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": problem, "X-Content-Type-Options": "nosniff", "Retry-After": "1",
		"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "1",
	})
	const body = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests in flight; retry in 1 second"}`
	if w.Code != http.StatusTooManyRequests || w.Body.String() != body {
		t.Fatalf("while the slot is held: %d %s, want 429 %s", w.Code, w.Body, body)
	}
	if w = finish(); w.Code != http.StatusOK {
		t.Fatalf("holder: %d", w.Code)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": "*", "Ratelimit-Limit": "3", "Ratelimit-Remaining": "2", "Ratelimit-Reset": "20", "Ratelimit-Policy": "3;w=60",
	})
	for range 2 {
		if w := limitertest.Get(h, "/"); w.Code != http.StatusOK {
			t.Fatalf("with a free slot and tokens: %d", w.Code)
		}
	}
	w = limitertest.Get(h, "/") // refused by the rate: no slot held
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "20" || w.Header().Get("Ratelimit-Remaining") != "0" ||
		w.Header().Get("Ratelimit-Policy") != "3;w=60" || !strings.Contains(w.Body.String(), "rate limit exceeded; retry in 20 seconds") {
		t.Fatalf("tokens gone: %d %v %s, want 429, the rate's fields, Retry-After 20", w.Code, w.Header(), w.Body)
	}
	want := []string{"exports-rate", "exports", "exports-rate", "exports-rate", "exports-rate"}
	if len(names) != len(want) {
		t.Fatalf("observer saw %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("observer saw %v, want %v", names, want)
		}
	}
}

// TestConcurrencyFieldsSaySlots: in every style, a refusal by slots
// carries no field reading as a rate: draft-06 has no RateLimit-Policy
// (it read "1;w=30", one per 30 s), draft-11's gives the quota unit
// (issue 36 item 10).
func TestConcurrencyFieldsSaySlots(t *testing.T) {
	t.Parallel()
	for style, want := range map[HeaderStyle]map[string]string{
		HeadersDraft06: {"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "1", "Retry-After": "1"},
		HeadersDraft11: {"Ratelimit-Policy": `"exports";q=1;qu="concurrent-requests"`, "Ratelimit": `"exports";r=0;t=1`, "Retry-After": "1"},
		HeadersNone:    {"Retry-After": "1"},
	} {
		mw := Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now), WithHeaders(style))
		finish := holding(t, mw)
		w := limitertest.Get(mw(okHandler), "/")
		finish()
		got := map[string]string{}
		for k, v := range w.Header() {
			if k != "Content-Type" && k != "X-Content-Type-Options" {
				got[k] = strings.Join(v, ",")
			}
		}
		if w.Code != http.StatusTooManyRequests || !maps.Equal(got, want) {
			t.Errorf("%v: %d %v, want 429 %v", style, w.Code, got, want)
		}
	}
}

// TestConcurrencyWithRateBothRefuse: when the slots are full and the
// Rate's tokens gone too, the refusal is the Rate's, with the Rate's own
// wait (1 s here), not the 30 s until the earliest lease ends.
func TestConcurrencyWithRateBothRefuse(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore(core.WithClock(limitertest.NewClock().Now))
	rate, err := core.New(core.Config{Store: store, Limit: core.PerSecond(1), Name: "exports-rate", FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "exports", Max: 1, Lease: 30 * time.Second, FailMode: core.FailClosed, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	mw := Concurrency(c)
	finish := holding(t, mw) // the slot and the token
	w := limitertest.Get(mw(okHandler), "/")
	finish()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("Ratelimit-Policy") != "1;w=1" ||
		!strings.Contains(w.Body.String(), "rate limit exceeded; retry in 1 second") {
		t.Fatalf("both refused: %d %v %s; want the rate's 429, Retry-After 1", w.Code, w.Header(), w.Body)
	}
}

// WithDelay books tokens ahead; a slot cannot be: Concurrency refuses it
// loudly (DESIGN §2a), as it refuses the other options it cannot keep.
func TestConcurrencyRefusesWithDelay(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "WithDelay") {
			t.Fatalf("got panic %v, want one naming WithDelay", r)
		}
	}()
	Concurrency(newConcurrency(t, 1, limitertest.NewClock().Now), WithDelay(time.Second))
}
