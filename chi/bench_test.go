package chi_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// steppingClock advances a second on every read, so a PerSecond(100)
// bucket is full before each decision: every request is allowed.
func steppingClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return epoch.Add(time.Duration(n.Add(1)) * time.Second) }
}

func constantKey(*http.Request) (string, error) { return "client-1", nil }

// discardWriter is a ResponseWriter that keeps only the header map, reused
// across requests so only the router and middleware are measured.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// benchRouter is a chi router with a few routes and mw either on the root
// router (before routing) or on the route itself (after routing).
func benchRouter(tb testing.TB, mw func(*core.Limiter) func(http.Handler) http.Handler, onRoute bool) (http.Handler, *discardWriter, *http.Request) {
	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(core.WithClock(steppingClock())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	if onRoute {
		r.With(mw(lim)).Get("/users/{id}", ok)
	} else {
		r.Use(mw(lim))
		r.Get("/users/{id}", ok)
	}
	r.Get("/", ok)
	r.Get("/about", ok)
	r.Get("/users/{id}/posts", ok)
	req, err := http.NewRequest(http.MethodGet, "/users/42", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r, &discardWriter{h: make(http.Header, 8)}, req
}

var (
	adapter = func(l *core.Limiter) func(http.Handler) http.Handler {
		return ratelimit.Middleware(l, ratelimit.WithKey(constantKey))
	}
	plain = func(l *core.Limiter) func(http.Handler) http.Handler {
		return nethttp.Middleware(l, nethttp.WithKey(constantKey))
	}
)

// BenchmarkAllowed compares, in the same chi router, this adapter with
// nethttp.Middleware (which sees no route pattern): the difference is the
// adapter's cost, the route lookup.
func BenchmarkAllowed(b *testing.B) {
	for _, bc := range []struct {
		name    string
		mw      func(*core.Limiter) func(http.Handler) http.Handler
		onRoute bool
	}{
		{"root/nethttp", plain, false},
		{"root/chi", adapter, false},
		{"route/nethttp", plain, true},
		{"route/chi", adapter, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, w, r := benchRouter(b, bc.mw, bc.onRoute)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if w.h.Get("RateLimit-Remaining") != "99" {
				b.Fatalf("headers %v", w.h)
			}
		})
	}
}
