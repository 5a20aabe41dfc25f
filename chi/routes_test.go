package chi_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestRoutesIssue14 replays each chi set-up of issue 14 that left a strict
// POST /login limit (3 a minute) unapplied, every POST answered 200: now
// the limit holds, or the first request logs why it cannot.
func TestRoutesIssue14(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		pattern string
		build   func(mw func(http.Handler) http.Handler) http.Handler
		paths   []string // POSTed in turn
		ok      int      // how many answer 200
		log     string   // a log line wanted, or "" for none
	}{
		{
			name: "a method in the pattern", pattern: "POST /login", ok: 3,
			paths: []string{"/login", "/login", "/login", "/login", "/login"},
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Use(mw)
				r.Post("/login", ok)
				return r
			},
		},
		{
			name: "a typo", pattern: "/logni", ok: 5,
			paths: []string{"/login", "/login", "/login", "/login", "/login"},
			log:   `level=ERROR msg="ratelimit: WithRoutes patterns match no route; their limits never apply" router=chi patterns=[/logni]`,
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Use(mw)
				r.Post("/login", ok)
				return r
			},
		},
		{
			name: "before StripSlashes and CleanPath on the root router", pattern: "POST /login", ok: 3,
			paths: []string{"/login/", "//login", "/login", "/login/", "//login", "/login"},
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Use(mw, middleware.CleanPath, middleware.StripSlashes)
				r.Post("/login", ok)
				return r
			},
		},
		{
			name: "StripSlashes in a mounted sub-router", pattern: "POST /api/login", ok: 3,
			paths: []string{"/api/login/", "/api/login", "/api/login/", "/api/login", "/api/login/", "/api/login"},
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				api := chi.NewRouter()
				api.Use(middleware.StripSlashes)
				api.Post("/login", ok)
				r := chi.NewRouter()
				r.Use(mw)
				r.Mount("/api", api)
				return r
			},
		},
		{
			name: "the router wrapped from outside", pattern: "POST /login", ok: 3,
			paths: []string{"/login", "/login", "/login", "/login", "/login"},
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Post("/login", ok)
				return mw(r)
			},
		},
		{
			name: "outside chi", pattern: "POST /login", ok: 5,
			paths: []string{"/login", "/login", "/login", "/login", "/login"},
			log:   `msg="ratelimit: WithRoutes limits never apply here: the middleware runs outside any chi router`,
			build: func(mw func(http.Handler) http.Handler) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("POST /login", ok)
				return mw(mux)
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			mw := ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(100)),
				ratelimit.WithRoutes(map[string]*core.Limiter{c.pattern: limitertest.NewLimiter(t, core.PerMinute(3))}),
				ratelimit.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			h := c.build(mw)
			got := 0
			for _, p := range c.paths {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, p, nil))
				if w.Code == http.StatusOK {
					got++
				}
			}
			if got != c.ok {
				t.Errorf("%d of %d POSTs answered 200, want %d", got, len(c.paths), c.ok)
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
		if got, _ := recover().(string); !strings.Contains(got, `pattern "/users/:id": chi writes a path parameter "{id}", not ":id"`) {
			t.Errorf("panic %q", got)
		}
	}()
	ratelimit.Middleware(l, ratelimit.WithRoutes(map[string]*core.Limiter{"/users/:id": l}))
}
