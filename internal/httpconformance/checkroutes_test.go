package httpconformance_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	labecho "github.com/labstack/echo/v4"
	labechov5 "github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	echov5 "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/nethttp"
)

// TestCheckRoutesAtStartup: every adapter's CheckRoutes reports, as an
// error a test or main can act on, the WithRoutes patterns that match no
// route of the router (a typo) or are written in another router's
// syntax, and nil when all apply (issue 23.8: a typo was only logged at
// the first request, and never for gin under httptest).
func TestCheckRoutesAtStartup(t *testing.T) {
	t.Parallel()
	l := mustLimiter(t, core.NewMemoryStore(), "check")
	h := func(http.ResponseWriter, *http.Request) {}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", h)
	mux.HandleFunc("GET /users/{id}", h)
	cr := gochi.NewRouter()
	cr.Post("/login", h)
	cr.Route("/api", func(r gochi.Router) { r.Get("/users/{id}", h) })
	e := labecho.New()
	e.POST("/login", func(labecho.Context) error { return nil })
	e.GET("/users/:id", func(labecho.Context) error { return nil })
	e5 := labechov5.New()
	e5.POST("/login", func(*labechov5.Context) error { return nil })
	e5.GET("/users/:id", func(*labechov5.Context) error { return nil })
	gingonic.SetMode(gingonic.ReleaseMode)
	g := gingonic.New()
	g.POST("/login", func(*gingonic.Context) {})
	g.GET("/users/:id", func(*gingonic.Context) {})

	routes := func(ps ...string) nethttp.Option {
		m := map[string]*core.Limiter{}
		for _, p := range ps {
			m[p] = l
		}
		return nethttp.WithRoutes(m)
	}
	for _, c := range []struct {
		name        string
		check       func(...nethttp.Option) error
		good, typo  []string
		wrongSyntax string
	}{
		{"nethttp", func(o ...nethttp.Option) error { return nethttp.CheckRoutes(mux, o...) },
			[]string{"POST /login", "/users/{id}"}, []string{"POST /logni"}, ""},
		{"chi", func(o ...nethttp.Option) error { return chi.CheckRoutes(cr, o...) },
			[]string{"POST /login", "GET /api/users/{id}"}, []string{"GET /users/{id}"}, "/api/users/:id"},
		{"echo", func(o ...nethttp.Option) error { return echo.CheckRoutes(e, o...) },
			[]string{"POST /login", "/users/:id"}, []string{"DELETE /users/:id"}, "/users/{id}"},
		{"echov5", func(o ...nethttp.Option) error { return echov5.CheckRoutes(e5, o...) },
			[]string{"POST /login", "/users/:id"}, []string{"/user/:id"}, "/users/{id}"},
		{"gin", func(o ...nethttp.Option) error { return gin.CheckRoutes(g, o...) },
			[]string{"POST /login", "GET /users/:id"}, []string{"GET /users/:uid"}, "/users/{id}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(routes(c.good...)); err != nil {
				t.Errorf("every pattern applies: %v", err)
			}
			err := c.check(routes(append(c.good, c.typo...)...))
			if !errors.Is(err, nethttp.ErrRoute) || !strings.Contains(err.Error(), c.typo[0]) || strings.Contains(err.Error(), c.good[0]) {
				t.Errorf("typo %q: %v, want an ErrRoute naming it alone", c.typo[0], err)
			}
			if c.wrongSyntax != "" {
				if err := c.check(routes(c.wrongSyntax)); !errors.Is(err, nethttp.ErrRoute) {
					t.Errorf("pattern %q in another router's syntax: %v, want ErrRoute", c.wrongSyntax, err)
				}
			}
		})
	}
}
