package main

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

// newApp returns the app, its limiters made from base (the store and
// anything else they share): one middleware around the whole ServeMux,
// with overrides by route pattern.
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

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "welcome") })
	mux.HandleFunc("GET /api/items", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "[]") })
	mux.HandleFunc("GET /api/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})
	return ratelimit.Middleware(def,
		ratelimit.WithRoutes(map[string]*core.Limiter{
			"POST /login":         login,
			"GET /api/items":      api,
			"GET /api/items/{id}": api, // /api/items/1 and /api/items/2 share one limit
		}),
	)(mux), nil // wrapping the mux itself: the middleware asks it where each request goes
}

// limiter returns a limiter of base with its own limit and failure mode.
func limiter(base core.Config, l core.Limit, mode core.FailMode) (*core.Limiter, error) {
	base.Limit, base.FailMode = l, mode
	return core.New(base)
}
