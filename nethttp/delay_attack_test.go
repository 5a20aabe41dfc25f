package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// delayGate is a Gate shaping under lim, with WithDelay(delay) and a
// MaxWait of delay, and a handler counting the requests it served.
func delayGate(t *testing.T, lim core.Limit, delay time.Duration) (*core.Limiter, *nethttp.Gate, func(ctx context.Context, key string) *httptest.ResponseRecorder, *atomic.Int64) {
	t.Helper()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: lim, FailMode: core.FailClosed, MaxWait: delay})
	if err != nil {
		t.Fatal(err)
	}
	g := nethttp.NewGate(l, nethttp.WithDelay(delay))
	var served atomic.Int64
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })
	serve := func(ctx context.Context, key string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		g.ServeKey(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx), key, next)
		return w
	}
	return l, g, serve, &served
}

// waitParked waits until n requests wait in g's room.
func waitParked(t *testing.T, g *nethttp.Gate, n int) {
	t.Helper()
	for nethttp.Parked(g) != n {
		time.Sleep(time.Millisecond)
	}
}

// Book and hang up (issue 44): on a shared key, an attacker parks
// requests that fill WithDelay's wait, then hangs up, each in the order
// it booked (the order in which Cancel gives back least). The key then
// owes nothing for them: the next request waits no longer than if the
// attacker had never come (before: 18 minutes, the attacker's bookings
// standing though the handler never ran for them; so every victim within
// WithDelay's wait was refused).
func TestWithDelayBookAndHangUp(t *testing.T) {
	l, g, serve, served := delayGate(t, core.PerMinute(1), time.Hour)
	if res, _ := l.AllowN(t.Context(), "shared", 1); !res.Allowed { // the burst: spent
		t.Fatal(res)
	}
	var attack sync.WaitGroup
	var hangUps []context.CancelFunc
	for i := range 18 {
		ctx, hangUp := context.WithCancel(t.Context())
		hangUps = append(hangUps, hangUp)
		attack.Go(func() {
			if w := serve(ctx, "shared"); w.Code != http.StatusTooManyRequests {
				t.Errorf("attacker: %d, want the 429 of a client that left", w.Code)
			}
		})
		waitParked(t, g, i+1)
	}
	for i, hangUp := range hangUps {
		hangUp()
		waitParked(t, g, len(hangUps)-i-1)
	}
	attack.Wait()
	if n := served.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for the attacker, want 0", n)
	}
	if res, _ := l.Peek(t.Context(), "shared", 1); res.RetryAfter > time.Minute {
		t.Fatalf("after the attacker hung up, the next token is %v away, want at most a minute", res.RetryAfter)
	}
}

// WithDelay's room is bounded: at most 64 requests of one key wait at
// once, and 1024 in all; one more is refused at once with the 429 (and
// Retry-After) it gets without WithDelay, and never reaches the handler.
func TestWithDelayRoomBounded(t *testing.T) {
	l, g, serve, served := delayGate(t, core.PerMinute(1), 2*time.Hour)
	ctx, leave := context.WithCancel(t.Context())
	var parked sync.WaitGroup
	defer func() { leave(); parked.Wait() }()
	for k := range 16 {
		key := "k" + strconv.Itoa(k)
		l.AllowN(ctx, key, 1) // the burst: spent
		for range 64 {
			parked.Go(func() { serve(ctx, key) })
		}
	}
	waitParked(t, g, 16*64)
	l.AllowN(ctx, "k16", 1)
	for _, key := range []string{"k0", "k16"} { // the key's line full; the room full
		answer := make(chan *httptest.ResponseRecorder, 1)
		go func() { answer <- serve(ctx, key) }()
		var w *httptest.ResponseRecorder
		for w == nil {
			select {
			case w = <-answer:
			default:
				if n := nethttp.Parked(g); n > 16*64 {
					t.Fatalf("%s beyond the bound: %d requests wait, want at most %d", key, n, 16*64)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s beyond the bound: %d %v, want a 429 with Retry-After", key, w.Code, w.Header())
		}
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("the handler ran %d times, want 0", n)
	}
}

// A client that leaves ahead of another on its key hands it its turn:
// the other moves up and the latest booking, its own, is given back, so
// the key owes one token for the two (before: two, the leaver's booking
// counted on by the later one and never given back).
func TestWithDelayLeaverHandsOnItsTurn(t *testing.T) {
	l, g, serve, served := delayGate(t, core.PerSecond(1), 5*time.Second)
	if res, _ := l.AllowN(t.Context(), "shared", 1); !res.Allowed { // the burst: spent
		t.Fatal(res)
	}
	leaver, leave := context.WithCancel(t.Context())
	left := make(chan int)
	go func() { left <- serve(leaver, "shared").Code }()
	waitParked(t, g, 1)
	stays := make(chan int)
	go func() { stays <- serve(t.Context(), "shared").Code }()
	waitParked(t, g, 2)
	leave()
	if code := <-left; code != http.StatusTooManyRequests {
		t.Fatalf("the leaver: %d", code)
	}
	if res, _ := l.Peek(t.Context(), "shared", 1); res.RetryAfter > 2500*time.Millisecond {
		t.Fatalf("after one of two left, the next token is %v away, want about 2s (one booking owed)", res.RetryAfter)
	}
	if code := <-stays; code != http.StatusOK || served.Load() != 1 {
		t.Fatalf("the one that stayed: %d, served %d; want 200, 1", code, served.Load())
	}
}
