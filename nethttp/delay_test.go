package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// WithDelay: a request over the limit whose token comes within the delay
// waits for it and reaches the handler; one that would wait longer gets
// the 429 it gets without WithDelay.
func TestWithDelayShapes(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), FailMode: core.FailClosed, MaxWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var reached int
	var mu sync.Mutex
	h := nethttp.Middleware(l, nethttp.WithDelay(1500*time.Millisecond), nethttp.WithKey(func(*http.Request) (string, error) { return "k", nil }))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mu.Lock(); reached++; mu.Unlock() }))
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		return w
	}
	if w := serve(); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	// The next token is 1s away: booked, and the request waits for it.
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve() }()
	// Wait until it is booked: then a third would wait 2s, more than
	// the delay allows, and is refused.
	for {
		if res, _ := l.Peek(t.Context(), "k", 1); res.RetryAfter > 1500*time.Millisecond {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w3 := serve()
	if w3.Code != http.StatusTooManyRequests || w3.Header().Get("Retry-After") == "" {
		t.Fatalf("third: %d %v, want a 429 with Retry-After", w3.Code, w3.Header())
	}
	w2 := <-done
	if w2.Code != http.StatusOK || w2.Header().Get("RateLimit-Remaining") != "0" {
		t.Fatalf("second: %d %v, want 200 after its wait, with the header fields", w2.Code, w2.Header())
	}
	if reached != 2 {
		t.Fatalf("the handler ran %d times, want 2", reached)
	}
}

// WithDelay above the limiter's MaxWait is refused at construction.
func TestWithDelayAboveMaxWait(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), FailMode: core.FailClosed, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("WithDelay(2s) accepted with MaxWait 1s")
		}
	}()
	nethttp.Middleware(l, nethttp.WithDelay(2*time.Second))
}

// A request decided by its route's own limiter is shaped under that
// limiter's limit, also when WithLimitFunc decides the other requests.
func TestWithDelayShapesRoutedRequest(t *testing.T) {
	newLimiter := func(name string) *core.Limiter {
		l, err := core.New(core.Config{Store: core.NewMemoryStore(), Name: name, Limit: core.PerSecond(1), FailMode: core.FailClosed, MaxWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	export := newLimiter("export")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /export", func(http.ResponseWriter, *http.Request) {})
	h := nethttp.Middleware(newLimiter("default"),
		nethttp.WithServeMux(mux),
		nethttp.WithRoutes(map[string]*core.Limiter{"GET /export": export}),
		nethttp.WithLimitFunc(func(*http.Request) (core.Limit, error) { return core.PerSecond(100), nil }),
		nethttp.WithDelay(1500*time.Millisecond),
		nethttp.WithKey(func(*http.Request) (string, error) { return "k", nil }))(mux)
	for i := 1; i <= 2; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/export", nil))
		if w.Code != http.StatusOK || w.Header().Get("RateLimit-Limit") != "1" {
			t.Fatalf("export %d: %d, RateLimit-Limit %q; want 200 (the second after its wait) under the route's limit 1", i, w.Code, w.Header().Get("RateLimit-Limit"))
		}
	}
}
