package chi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	ratelimit "github.com/sluicehq/ratelimit/chi"
)

// TestRoutePattern checks that RoutePattern, wherever the middleware sits,
// gives the pattern chi reports in the handler.
func TestRoutePattern(t *testing.T) {
	t.Parallel()
	// seen records RoutePattern as each middleware saw it, by position.
	seen := map[string]string{}
	record := func(where string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen[where] = ratelimit.RoutePattern(r)
				next.ServeHTTP(w, r)
			})
		}
	}
	var inHandler string
	h := func(w http.ResponseWriter, r *http.Request) {
		inHandler = chi.RouteContext(r.Context()).RoutePattern()
	}

	r := chi.NewRouter()
	r.Use(record("root"))
	r.Get("/", h)
	r.Get("/users/{id}", h)
	r.Get("/files/*", h)
	r.With(record("inline")).Get("/login", h)
	r.Group(func(r chi.Router) {
		r.Use(record("group"))
		r.Get("/grouped/{id:[0-9]+}", h)
	})
	r.Route("/api", func(r chi.Router) {
		r.Use(record("sub"))
		r.Get("/", h)
		r.Get("/items/{id}", h)
		r.Route("/v2", func(r chi.Router) {
			r.Use(record("subsub"))
			r.Get("/items/{id}/parts/*", h)
			r.Get("/", h)
		})
	})
	r.Mount("/static", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		inHandler = "/static/*" // a plain handler mounted: chi's pattern so far
	}))

	for _, c := range []struct {
		method, path string
		want         string
		where        []string
	}{
		{"GET", "/", "/", []string{"root"}},
		{"GET", "/users/7", "/users/{id}", []string{"root"}},
		{"GET", "/files/a/b.txt", "/files/*", []string{"root"}},
		{"GET", "/login", "/login", []string{"root", "inline"}},
		{"GET", "/grouped/12", "/grouped/{id:[0-9]+}", []string{"root", "group"}},
		{"GET", "/api", "/api", []string{"root", "sub"}},
		{"GET", "/api/", "/api", []string{"root", "sub"}},
		{"GET", "/api/items/3", "/api/items/{id}", []string{"root", "sub"}},
		{"GET", "/api/v2/items/3/parts/x/y", "/api/v2/items/{id}/parts/*", []string{"root", "sub", "subsub"}},
		{"GET", "/api/v2/", "/api/v2", []string{"root", "sub", "subsub"}},
		{"GET", "/static/app.js", "/static/*", []string{"root"}},
		{"GET", "/nope", "", []string{"root"}},
		{"POST", "/users/7", "", []string{"root"}},
		{"GET", "/api/nope", "", []string{"root", "sub"}},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			clear(seen)
			inHandler = ""
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(c.method, c.path, nil))
			if inHandler != c.want {
				t.Fatalf("handler saw %q, want %q", inHandler, c.want)
			}
			for _, where := range c.where {
				if got := seen[where]; got != c.want {
					t.Errorf("middleware at %s: got %q, want %q", where, got, c.want)
				}
			}
			if len(seen) != len(c.where) {
				t.Errorf("middlewares run: %v, want %v", seen, c.where)
			}
		})
	}
}

func TestRoutePatternOutsideChi(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/users/1", nil)
	r.Pattern = "GET /users/{id}"
	if got := ratelimit.RoutePattern(r); got != "" {
		t.Errorf("got %q, want \"\"", got)
	}
}
