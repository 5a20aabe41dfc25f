package gin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The ways to put the limiter in a gin app, for the allowed path: without
// any, nethttp's middleware wrapped the usual way (gin has no wrapper of
// its own), the least glue around nethttp's Gate (the floor), and this
// package's middleware.
var setups = []struct {
	name string
	mw   func(*core.Limiter) gin.HandlerFunc
}{
	{"none", nil},
	{"nethttp-wrapped", func(l *core.Limiter) gin.HandlerFunc {
		mw := nethttp.Middleware(l, nethttp.WithKey(limitertest.ConstantKey))
		return func(c *gin.Context) {
			next := false
			mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				next = true
				c.Request = r
			})).ServeHTTP(c.Writer, c.Request)
			if !next {
				c.Abort()
			}
		}
	}},
	{"gate", func(l *core.Limiter) gin.HandlerFunc {
		g := nethttp.NewGate(l, nethttp.WithKey(limitertest.ConstantKey))
		return func(c *gin.Context) {
			if !g.Serve(c.Writer, c.Request, nethttp.Chain{Next: func(http.ResponseWriter) int { return http.StatusOK }}) {
				c.Abort()
			}
		}
	}},
	{"adapter", func(l *core.Limiter) gin.HandlerFunc {
		return ratelimit.Middleware(l, ratelimit.WithKey(limitertest.ConstantKey))
	}},
}

func benchApp(tb testing.TB, mw func(*core.Limiter) gin.HandlerFunc) (http.Handler, *limitertest.DiscardWriter, *http.Request) {
	lim := limitertest.NewLimiterClock(tb, core.PerSecond(100), limitertest.Stepping())
	r := gin.New()
	if mw != nil {
		r.Use(mw(lim))
	}
	ok := func(*gin.Context) {}
	r.GET("/", ok)
	r.GET("/about", ok)
	r.GET("/users/:id", ok)
	r.GET("/users/:id/posts", ok)
	req, err := http.NewRequest(http.MethodGet, "/users/42", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r, limitertest.NewDiscardWriter(), req
}

// BenchmarkAllowed: go test -run '^$' -bench . -benchmem ./gin
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

// TestAllowedAllocs locks the adapter's cost: on the allowed path with the
// memory store and a constant key, only nethttp's one allocation (the
// response's own header values), as with the least glue around the Gate.
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
	if allocs["adapter"] != 1 || allocs["gate"] != 1 {
		t.Errorf("allocs per request %v: want 1 for adapter and gate", allocs)
	}
}
