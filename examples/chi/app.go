package main

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
)

// newApp returns the app, its limiters made from base (the store and
// anything else they share): one middleware on the whole router,
// with overrides by chi route pattern.
func newApp(base core.Config) (http.Handler, error) {
	def, err := limiter(base, core.PerMinute(60), core.FailOpen)
	if err != nil {
		return nil, err
	}
	// Strict, and closed when Redis is down: guessing passwords must not
	// get faster during an outage.
	login, err := limiter(base, core.PerMinute(5), core.FailClosed)
	if err != nil {
		return nil, err
	}
	api, err := limiter(base, core.PerMinute(1000), core.FailOpen)
	if err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(ratelimit.Middleware(def, ratelimit.WithRoutes(map[string]*core.Limiter{
		"POST /login":         login,
		"GET /api/items":      api,
		"GET /api/items/{id}": api, // /api/items/1 and /api/items/2 share one limit
	})))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	r.Post("/login", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "welcome") })
	r.Route("/api", func(r chi.Router) {
		r.Get("/items", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "[]") })
		r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s\n", chi.URLParam(r, "id"))
		})
	})
	return r, nil
}

// limiter returns a limiter of base with its own limit and failure mode.
func limiter(base core.Config, l core.Limit, mode core.FailMode) (*core.Limiter, error) {
	base.Limit, base.FailMode = l, mode
	return core.New(base)
}
