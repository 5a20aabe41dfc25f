package echo_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The ways to put the limiter in an echo app, for the allowed path:
// without any, nethttp's middleware through echo.WrapMiddleware (what one
// writes without this package), the least glue around nethttp's Gate that
// echo allows (the floor), and this package's middleware.
var setups = []struct {
	name string
	mw   func(*core.Limiter) echo.MiddlewareFunc
}{
	{"none", nil},
	{"nethttp-wrapped", func(l *core.Limiter) echo.MiddlewareFunc {
		return echo.WrapMiddleware(nethttp.Middleware(l, nethttp.WithKey(limitertest.ConstantKey)))
	}},
	{"gate", func(l *core.Limiter) echo.MiddlewareFunc {
		g := nethttp.NewGate(l, nethttp.WithKey(limitertest.ConstantKey))
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				var err error
				g.Serve(c.Response(), c.Request(), nethttp.Chain{Next: func(http.ResponseWriter) int {
					err = next(c)
					return http.StatusOK
				}})
				return err
			}
		}
	}},
	{"adapter", func(l *core.Limiter) echo.MiddlewareFunc {
		return ratelimit.Middleware(l, ratelimit.WithKey(limitertest.ConstantKey))
	}},
}

func benchApp(tb testing.TB, mw func(*core.Limiter) echo.MiddlewareFunc) (http.Handler, *limitertest.DiscardWriter, *http.Request) {
	lim := limitertest.NewLimiterClock(tb, core.PerSecond(100), limitertest.Stepping())
	e := echo.New()
	if mw != nil {
		e.Use(mw(lim))
	}
	ok := func(*echo.Context) error { return nil }
	e.GET("/", ok)
	e.GET("/about", ok)
	e.GET("/users/:id", ok)
	e.GET("/users/:id/posts", ok)
	r, err := http.NewRequest(http.MethodGet, "/users/42", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return e, limitertest.NewDiscardWriter(), r
}

// BenchmarkAllowed: go test -run '^$' -bench . -benchmem ./echo/v5
func BenchmarkAllowed(b *testing.B) {
	for _, s := range setups {
		b.Run(s.name, func(b *testing.B) {
			h, w, r := benchApp(b, s.mw)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.H)
				h.ServeHTTP(w, r)
			}
			if s.mw != nil && w.H.Get("RateLimit-Remaining") != "99" {
				b.Fatalf("headers %v", w.H)
			}
		})
	}
}

// TestAllowedAllocs locks the adapter's cost in allocations: none more
// than the floor (echo itself allocates a closure per middleware and
// request), and fewer than nethttp through echo.WrapMiddleware.
func TestAllowedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	allocs := map[string]float64{}
	for _, s := range setups {
		h, w, r := benchApp(t, s.mw)
		allocs[s.name] = testing.AllocsPerRun(1000, func() {
			clear(w.H)
			h.ServeHTTP(w, r)
		})
	}
	if allocs["adapter"] > allocs["gate"] || allocs["adapter"] >= allocs["nethttp-wrapped"] {
		t.Errorf("allocs per request %v: want adapter ≤ gate < nethttp-wrapped", allocs)
	}
}
