package chi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

type want struct {
	path  string
	code  int
	limit string
}

func expect(t *testing.T, h http.Handler, wants ...want) {
	t.Helper()
	for _, c := range wants {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		if w.Code != c.code || w.Header().Get("RateLimit-Limit") != c.limit {
			t.Errorf("%s: %d limit %q, want %d limit %q", c.path, w.Code, w.Header().Get("RateLimit-Limit"), c.code, c.limit)
		}
	}
}

var ok = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// WithRoutes works from a middleware anywhere: on the root router and on a
// sub-router (both before routing), on a group and on a route.
func TestRoutesWherever(t *testing.T) {
	t.Parallel()
	t.Run("root", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
			ratelimit.WithRoutes(map[string]*core.Limiter{"/api/users/{id}": limitertest.NewLimiter(t, core.PerMinute(1))})))
		r.Route("/api", func(r chi.Router) { r.Get("/users/{id}", ok); r.Get("/items", ok) })
		expect(t, r, want{"/api/users/1", 200, "1"}, want{"/api/users/2", 429, "1"}, want{"/api/items", 200, "50"}, want{"/nope", 404, "50"})
	})
	t.Run("sub-router", func(t *testing.T) {
		r := chi.NewRouter()
		r.Route("/api", func(r chi.Router) {
			r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
				ratelimit.WithRoutes(map[string]*core.Limiter{"/api/users/{id}": limitertest.NewLimiter(t, core.PerMinute(1))})))
			r.Get("/users/{id}", ok)
			r.Get("/items", ok)
		})
		expect(t, r, want{"/api/users/1", 200, "1"}, want{"/api/users/2", 429, "1"}, want{"/api/items", 200, "50"})
	})
	t.Run("group and route", func(t *testing.T) {
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
				ratelimit.WithRoutes(map[string]*core.Limiter{"/users/{id}": limitertest.NewLimiter(t, core.PerMinute(1))})))
			r.Get("/users/{id}", ok)
			r.Get("/items", ok)
		})
		r.With(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(2)))).Get("/login", ok)
		expect(t, r, want{"/users/1", 200, "1"}, want{"/users/2", 429, "1"}, want{"/items", 200, "50"}, want{"/login", 200, "2"})
	})
	t.Run("after StripSlashes", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(middleware.StripSlashes)
		r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
			ratelimit.WithRoutes(map[string]*core.Limiter{"/users/{id}": limitertest.NewLimiter(t, core.PerMinute(1))})))
		r.Get("/users/{id}", ok)
		expect(t, r, want{"/users/1/", 200, "1"}, want{"/users/2", 429, "1"})
	})
}

// Outside chi the middleware still limits, by its default limiter.
func TestOutsideChi(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", ok)
	h := ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(1)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"/users/{id}": limitertest.NewLimiter(t, core.PerMinute(5))}))(mux)
	expect(t, h, want{"/users/1", 200, "1"}, want{"/users/1", 429, "1"})
}
