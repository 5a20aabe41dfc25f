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
	return allowedSetupLimit(tb, core.PerSecond(100), opts...)
}

// allowedSetupLimit is allowedSetup with the limit lim: every request
// finds the bucket full, so RateLimit-Remaining is lim's capacity − 1.
func allowedSetupLimit(tb testing.TB, lim core.Limit, opts ...Option) (http.Handler, *discardWriter, *http.Request) {
	l := limitertest.New(tb, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    lim,
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

// BenchmarkMiddlewareAllowed is the allowed path, 100 a second (the
// header values below 100, which strconv formats without allocating),
// 1000 a minute (RateLimit-Remaining 999, from the shared table of
// headers.go) and with the limiter chosen by WithLimiterFunc (its header
// values formatted at first sight, not per response).
func BenchmarkMiddlewareAllowed(b *testing.B) {
	for _, bc := range []struct {
		name string
		lim  core.Limit // default core.PerSecond(100)
		tier bool       // WithLimiterFunc picks another limiter, 1000 a minute
		opts []Option
	}{
		{"ip/draft06", core.Limit{}, false, nil},
		{"key/draft06", core.Limit{}, false, []Option{WithKey(limitertest.ConstantKey)}},
		{"key/draft06/1000-per-minute", core.PerMinute(1000), false, []Option{WithKey(limitertest.ConstantKey)}},
		{"key/draft06/tier", core.Limit{}, true, []Option{WithKey(limitertest.ConstantKey)}},
		{"key/draft11", core.Limit{}, false, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersDraft11)}},
		{"key/legacy", core.Limit{}, false, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersLegacy)}},
		{"key/none", core.Limit{}, false, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersNone)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lim := bc.lim
			if lim == (core.Limit{}) {
				lim = core.PerSecond(100)
			}
			opts := bc.opts
			if bc.tier {
				opts = append(opts, withTier(b))
			}
			h, w, r := allowedSetupLimit(b, lim, opts...)
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

// withTier is WithLimiterFunc giving every request a limiter of its own,
// 1000 a minute, that the Gate meets first when a request comes.
func withTier(tb testing.TB) Option {
	tier := limitertest.New(tb, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerMinute(1000),
		FailMode: core.FailOpen,
		Name:     "tier",
	})
	return WithLimiterFunc(func(*http.Request) *core.Limiter { return tier })
}

// TestAllowedAllocs locks DESIGN §8's budget: the allowed path costs one
// allocation of the middleware's own in the default style (the array the
// response's header values live in, so that no response shares them with
// another), also through WithRoutes and WithLimiterFunc (the key
// function's are the key function's) and with header values of up to
// four digits, and at most 2 with keyfuncs.IP.
func TestAllowedAllocs(t *testing.T) {
	other := limitertest.New(t, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(limitertest.Stepping())),
		Limit:    core.PerSecond(100),
		FailMode: core.FailOpen,
		Name:     "other",
	})
	perMinute := core.PerMinute(1000)
	for _, c := range []struct {
		name string
		lim  core.Limit // default core.PerSecond(100)
		opts []Option
		max  float64
	}{
		{"constant key, draft06", core.Limit{}, []Option{WithKey(limitertest.ConstantKey)}, 1},
		{"constant key, draft06, 1000 a minute", perMinute, []Option{WithKey(limitertest.ConstantKey)}, 1},
		{"constant key, legacy, 1000 a minute", perMinute, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersLegacy)}, 2},
		{"constant key, none", core.Limit{}, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersNone)}, 0},
		{"constant key, routes and tiers", core.Limit{}, []Option{WithKey(limitertest.ConstantKey), WithRoutes(map[string]*core.Limiter{"GET /x": other}), WithLimiterFunc(func(*http.Request) *core.Limiter { return other })}, 1},
		{"constant key, tier met at the first request", core.Limit{}, []Option{WithKey(limitertest.ConstantKey), withTier(t)}, 1},
		{"constant key, draft11", core.Limit{}, []Option{WithKey(limitertest.ConstantKey), WithHeaders(HeadersDraft11)}, 2},
		{"keyfuncs.IP, draft06", core.Limit{}, nil, 2},
		{"keyfuncs.IP, draft06, 1000 a minute", perMinute, nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim := c.lim
			if lim == (core.Limit{}) {
				lim = core.PerSecond(100)
			}
			h, w, r := allowedSetupLimit(t, lim, c.opts...)
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
