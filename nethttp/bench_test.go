package nethttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// allowedSetup is the allowed path through Middleware with the memory
// store and one client: the request and the writer's header map are reused,
// so only the middleware's own work is measured.
func allowedSetup(tb testing.TB, opts ...Option) (http.Handler, *discardWriter, *http.Request) {
	l := limitertest.New(tb, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
	})
	h := Middleware(l, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return h, &discardWriter{h: make(http.Header, 8)}, r
}

func BenchmarkMiddlewareAllowed(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"ip/draft06", nil},
		{"key/draft06", []Option{WithKey(limitertest.ConstantKey)}},
		{"key/draft11", []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersDraft11)}},
		{"key/legacy", []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersLegacy)}},
		{"key/none", []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersNone)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, w, r := allowedSetup(b, bc.opts...)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if w.h.Get("Retry-After") != "" {
				b.Fatal("denied")
			}
		})
	}
}

func BenchmarkMiddlewareDenied(b *testing.B) {
	l := limitertest.New(b, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(func() time.Time { return limitertest.Epoch })),
		Limit:    core.PerMinute(1),
		FailMode: core.FailOpen,
	})
	h := Middleware(l, WithKey(limitertest.ConstantKey))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	w := &discardWriter{h: make(http.Header, 8)}
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, r)
	}
	if w.status != http.StatusTooManyRequests {
		b.Fatalf("status %d", w.status)
	}
}

// TestAllowedAllocs locks DESIGN §8's budget: the allowed path costs one
// allocation of the middleware's own in the default style (the array the
// response's header values live in, so that no response shares them with
// another), also through WithRoutes and WithLimiterFunc (the key
// function's are the key function's), and at most 2 with keyfuncs.IP.
func TestAllowedAllocs(t *testing.T) {
	other := limitertest.New(t, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
		Name:     "other",
	})
	for _, c := range []struct {
		name string
		opts []Option
		max  float64
	}{
		{"constant key, draft06", []Option{WithKey(limitertest.ConstantKey)}, 1},
		{"constant key, none", []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersNone)}, 0},
		{"constant key, routes and tiers", []Option{WithKey(limitertest.ConstantKey), WithRoutes(map[string]*core.Limiter{"GET /x": other}), WithLimiterFunc(func(*http.Request) *core.Limiter { return other })}, 1},
		{"constant key, draft11", []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersDraft11)}, 2},
		{"keyfuncs.IP, draft06", nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, w, r := allowedSetup(t, c.opts...)
			got := testing.AllocsPerRun(1000, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
			})
			if got > c.max {
				t.Errorf("%v allocs per request, want at most %v", got, c.max)
			}
			if w.h.Get("Retry-After") != "" {
				t.Fatal("denied")
			}
		})
	}
}

// BenchmarkMiddlewareServeMux is the allowed path of a middleware wrapping
// a whole ServeMux with per-route limits: one more route match per request.
func BenchmarkMiddlewareServeMux(b *testing.B) {
	mux := http.NewServeMux()
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux.Handle("GET /users/{id}", noop)
	mux.Handle("GET /", noop)
	other := limitertest.New(b, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
		Name:     "users",
	})
	_, w, _ := allowedSetup(b)
	l := limitertest.New(b, core.Config{Store: core.NewMemoryStore(core.WithClock(limitertest.Stepping())), Limit: core.PerSecond(100), FailMode: core.FailOpen})
	h := Middleware(l, WithKey(limitertest.ConstantKey), WithRoutes(map[string]*core.Limiter{"GET /users/{id}": other}), WithServeMux(mux))(mux)
	r, _ := http.NewRequest(http.MethodGet, "/users/42", nil)
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	if w.h.Get("Ratelimit-Policy") != "100;w=1" || w.h.Get("Retry-After") != "" {
		b.Fatalf("header %v", w.h)
	}
}

// BenchmarkAllowNReference is the limiter alone under the same setup as
// BenchmarkMiddlewareAllowed: the difference is the middleware's own cost.
func BenchmarkAllowNReference(b *testing.B) {
	l := limitertest.New(b, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
	})
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if res, _ := l.AllowN(ctx, "client-1", 1); !res.Allowed {
			b.Fatal("denied")
		}
	}
}
