package chi

import (
	"net/http"
	"sync/atomic"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Middleware returns chi middleware limiting requests with l, for r.Use,
// r.With, r.Group or a sub-router's r.Use. It is nethttp.Middleware with
// the route pattern taken from chi (see WithRoutes), so the status codes,
// header fields and bodies are those of package nethttp.
//
// The pattern is looked up only when WithRoutes was given: on a router's
// r.Use, which chi runs before routing, that is one more route match per
// request (see RoutePattern); on a group or a route it is free. The first
// request checks every WithRoutes pattern against the router's routes
// (chi.Walk) and logs, once, those that match none.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as chi writes routes ("/users/{id}", not "/users/:id").
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	g := nethttp.NewGate(l, opts...).ForRouter("chi", false)
	if !g.HasRoutes() {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if ok, c := g.Begin(w, r, "", nil); ok {
					g.Serve(next, w, r, c)
				}
			})
		}
	}
	var found atomic.Uint32 // path rewrites found in the router (rewrites)
	return func(next http.Handler) http.Handler {
		outer, _ := next.(chi.Routes) // a router wrapped from outside
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.CheckRoutes(func() ([]string, string, bool) { return walkRoutes(r, outer, &found) })
			if ok, c := g.Begin(w, r, routePattern(r, outer, rewrites(found.Load())), nil); ok {
				g.Serve(next, w, r, c)
			}
		})
	}
}
