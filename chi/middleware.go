package chi

import (
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Middleware returns chi middleware limiting requests with l, for r.Use,
// r.With, r.Group or a sub-router's r.Use. It is nethttp.Middleware with
// the route pattern taken from chi (RoutePattern, see WithRoutes), so the
// status codes, header fields and bodies are those of package nethttp.
//
// The pattern is looked up only when WithRoutes was given: on a router's
// r.Use, which chi runs before routing, that is one more route match per
// request (see RoutePattern); on a group or a route it is free.
//
// Middleware panics if l is nil or an option is nil.
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	g := nethttp.NewGate(l, opts...)
	pattern := noPattern
	if g.HasRoutes() {
		pattern = RoutePattern
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if g.DecideRoute(w, r, pattern(r)) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

func noPattern(*http.Request) string { return "" }
