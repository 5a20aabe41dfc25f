package echo_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestRoutesIssue14 replays on echo v5 the set-ups of issue 14 and its kin
// that left a strict POST /login limit (3 a minute) unapplied, 5 of 5 POSTs
// answered 200: now the limit holds, or the first request logs why not.
func TestRoutesIssue14(t *testing.T) {
	t.Parallel()
	login := func(c *echo.Context) error { return c.NoContent(http.StatusOK) }
	for _, c := range []struct {
		name    string
		pattern string
		path    string // POSTed to; default /login
		build   func(e *echo.Echo, mw echo.MiddlewareFunc)
		ok      int
		log     string
	}{
		{
			name: "a method in the pattern", pattern: "POST /login", ok: 3,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw); e.POST("/login", login) },
		},
		{
			name: "in a group", pattern: "POST /api/login", path: "/api/login", ok: 3,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw); e.Group("/api").POST("/login", login) },
		},
		{
			name: "in a group with its own middleware", pattern: "POST /api/login", path: "/api/login", ok: 3,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Group("/api", mw).POST("/login", login) },
		},
		{
			// v5 registers e.Any as one route for every method.
			name: "an Any route", pattern: "POST /login", ok: 3,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw); e.Any("/login", login) },
		},
		{
			name: "a typo", pattern: "/logni", ok: 5,
			log:   `level=ERROR msg="ratelimit: WithRoutes patterns match no route; their limits never apply" router=echo patterns=[/logni]`,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw); e.POST("/login", login) },
		},
		{
			name: "another method", pattern: "GET /login", ok: 5,
			log:   `level=ERROR msg="ratelimit: WithRoutes patterns match no route; their limits never apply" router=echo patterns="[GET /login]"`,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Use(mw); e.POST("/login", login) },
		},
		{
			name: "e.Pre", pattern: "POST /login", ok: 5,
			log:   `level=ERROR msg="ratelimit: WithRoutes limits never apply here: the middleware runs in e.Pre, before echo routes the request (c.Path() is empty): give it to e.Use" router=echo patterns="[POST /login]"`,
			build: func(e *echo.Echo, mw echo.MiddlewareFunc) { e.Pre(mw); e.POST("/login", login) },
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			e := echo.New()
			c.build(e, ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(100)),
				ratelimit.WithRoutes(map[string]*core.Limiter{c.pattern: limitertest.NewLimiter(t, core.PerMinute(3))}),
				ratelimit.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
			path := c.path
			if path == "" {
				path = "/login"
			}
			// A 404 first: it tells nothing about where the middleware runs.
			e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/nope", nil))
			got := 0
			for range 5 {
				w := httptest.NewRecorder()
				e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
				if w.Code == http.StatusOK {
					got++
				}
			}
			if got != c.ok {
				t.Errorf("%d of 5 POSTs to %s answered 200, want %d", got, path, c.ok)
			}
			switch logged := log.String(); {
			case c.log == "" && logged != "":
				t.Errorf("logged %q, want nothing", logged)
			case c.log != "" && (!strings.Contains(logged, c.log) || strings.Count(logged, "\n") != 1):
				t.Errorf("logged %q, want one line with %q", logged, c.log)
			}
		})
	}
}

func TestRoutesSyntax(t *testing.T) {
	t.Parallel()
	l := limitertest.NewLimiter(t, core.PerMinute(1))
	defer func() {
		if got, _ := recover().(string); !strings.Contains(got, `pattern "/users/{id}": echo writes a path parameter ":id", not "{id}"`) {
			t.Errorf("panic %q", got)
		}
	}()
	ratelimit.Middleware(l, ratelimit.WithRoutes(map[string]*core.Limiter{"/users/{id}": l}))
}
