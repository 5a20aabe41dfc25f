package chi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// benchRouter is a chi router with a few routes and mw either on the root
// router (before routing) or on the route itself (after routing).
func benchRouter(tb testing.TB, mw func(*core.Limiter) func(http.Handler) http.Handler, onRoute bool) (http.Handler, *limitertest.DiscardWriter, *http.Request) {
	lim := limitertest.NewLimiterClock(tb, core.PerSecond(100), limitertest.Stepping())
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
	return r, limitertest.NewDiscardWriter(), req
}

var (
	adapter = func(l *core.Limiter) func(http.Handler) http.Handler {
		return ratelimit.Middleware(l, ratelimit.WithKey(limitertest.ConstantKey))
	}
	// withRoutes has an override for another route: the pattern is looked
	// up, and the default limiter decides.
	withRoutes = func(l *core.Limiter) func(http.Handler) http.Handler {
		return ratelimit.Middleware(l, ratelimit.WithKey(limitertest.ConstantKey), ratelimit.WithRoutes(map[string]*core.Limiter{"/about": l}))
	}
	plain = func(l *core.Limiter) func(http.Handler) http.Handler {
		return nethttp.Middleware(l, nethttp.WithKey(limitertest.ConstantKey))
	}
)

// setups put the middleware on the root router (r.Use, before routing) or
// on the route (r.With, after routing): nethttp.Middleware, which sees no
// route pattern, then this adapter, then this adapter with WithRoutes.
var setups = []struct {
	name    string
	mw      func(*core.Limiter) func(http.Handler) http.Handler
	onRoute bool
}{
	{"root/nethttp", plain, false},
	{"root/chi", adapter, false},
	{"root/chi+routes", withRoutes, false},
	{"route/nethttp", plain, true},
	{"route/chi", adapter, true},
	{"route/chi+routes", withRoutes, true},
}

// BenchmarkAllowed compares, in the same chi router, this adapter with
// nethttp.Middleware: the difference is the adapter's cost, which is the
// route lookup when WithRoutes is given to a root middleware.
//
//	go test -run '^$' -bench Allowed -benchmem ./chi
func BenchmarkAllowed(b *testing.B) {
	for _, bc := range setups {
		b.Run(bc.name, func(b *testing.B) {
			h, w, r := benchRouter(b, bc.mw, bc.onRoute)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.H)
				h.ServeHTTP(w, r)
			}
			if w.H.Get("RateLimit-Remaining") != "99" {
				b.Fatalf("headers %v", w.H)
			}
		})
	}
}

// TestAllowedAllocs locks the adapter's cost in allocations: none beyond
// chi's own and nethttp's, wherever the middleware sits, with or without
// WithRoutes.
func TestAllowedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	allocs := map[string]float64{}
	for _, s := range setups {
		h, w, r := benchRouter(t, s.mw, s.onRoute)
		allocs[s.name] = testing.AllocsPerRun(1000, func() {
			clear(w.H)
			h.ServeHTTP(w, r)
		})
	}
	for _, where := range []string{"root", "route"} {
		base := allocs[where+"/nethttp"]
		if allocs[where+"/chi"] != base || allocs[where+"/chi+routes"] != base {
			t.Errorf("allocs per request %v: want the chi ones equal to %s/nethttp's", allocs, where)
		}
	}
}

// BenchmarkRoutePattern is the adapter's own work: finding the pattern
// before routing (root middleware, one more route match) and reading it
// after routing (route middleware).
func BenchmarkRoutePattern(b *testing.B) {
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	r.Get("/", ok)
	r.Get("/about", ok)
	r.Get("/users/{id}", ok)
	r.Get("/users/{id}/posts", ok)
	r.Route("/api", func(r chi.Router) { r.Get("/items/{id}", ok) })
	for _, bc := range []struct {
		name, path string
		routed     bool
	}{
		{"before-routing", "/users/42", false},
		{"before-routing/sub-router", "/api/items/7", false},
		{"after-routing", "/users/42", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rctx := chi.NewRouteContext()
			rctx.Routes = r
			req, _ := http.NewRequest(http.MethodGet, bc.path, nil)
			if bc.routed {
				rctx.RoutePatterns = []string{"/users/{id}"}
				req.Pattern = "/users/{id}"
			}
			req = req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, rctx))
			b.ReportAllocs()
			for b.Loop() {
				sink = ratelimit.RoutePattern(req)
			}
		})
	}
}

var sink string
