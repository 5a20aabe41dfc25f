package main

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
)

// newApp returns the app, its limits kept in store: one middleware on the
// whole router, with overrides by chi route pattern.
func newApp(store core.Store) (http.Handler, error) {
	def, err := core.New(core.Config{Store: store, Limit: core.PerMinute(60), FailMode: core.FailOpen})
	if err != nil {
		return nil, err
	}
	// Strict, and closed when Redis is down: guessing passwords must not
	// get faster during an outage.
	login, err := core.New(core.Config{Store: store, Limit: core.PerMinute(5), FailMode: core.FailClosed})
	if err != nil {
		return nil, err
	}
	api, err := core.New(core.Config{Store: store, Limit: core.PerMinute(1000), FailMode: core.FailOpen})
	if err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	r.Use(ratelimit.Middleware(def, ratelimit.WithRoutes(map[string]*core.Limiter{
		"/login":          login,
		"/api/items":      api,
		"/api/items/{id}": api, // /api/items/1 and /api/items/2 share one limit
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
