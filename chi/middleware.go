package chi

import (
	"net/http"
	"sync/atomic"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// router is chi, for nethttp's Gate: path parameters "{id}".
var router = nethttp.Router{Name: "chi"}

// Middleware returns chi middleware limiting requests with l, for r.Use,
// r.With, r.Group or a sub-router's r.Use. It is nethttp.Middleware with
// the route pattern taken from chi (see WithRoutes), so the status codes,
// header fields and bodies are those of package nethttp.
//
// The pattern is looked up only when WithRoutes was given: on a router's
// r.Use, which chi runs before routing, that is one more route match per
// request (see RoutePattern); on a group or a route it is free. The first
// request checks every WithRoutes pattern against the router's routes
// (chi.Walk) and logs, once, those that match none; CheckRoutes checks
// them at startup or in a test.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as chi writes routes ("/users/{id}", not "/users/:id").
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	g := router.NewGate(l, opts...)
	var found atomic.Uint32 // path rewrites found in the router (rewrites)
	return func(next http.Handler) http.Handler {
		outer, _ := next.(chi.Routes) // a router wrapped from outside
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.Serve(w, r, nethttp.Chain{
				Route:  func() string { return routePattern(r, outer, rewrites(found.Load())) },
				Routes: func() ([]string, string, bool) { return walkRoutes(r, outer, &found) },
				NoOptionsRoute: func() bool {
					return routesKnown(r, outer) && routePattern(r, outer, rewrites(found.Load())) == ""
				},
				Next: func(w http.ResponseWriter) int {
					next.ServeHTTP(w, r)
					return http.StatusOK
				},
			})
		})
	}
}

// CheckRoutes returns an error (matching nethttp.ErrRoute) naming every
// WithRoutes pattern among opts that matches no route of r (chi.Walk: its
// routes and its sub-routers'), or is not written as chi writes routes;
// nil when every pattern applies. Call it once the routes are registered,
// at startup or in a test, with the options given to Middleware.
func CheckRoutes(r chi.Routes, opts ...Option) error {
	list, _ := chiRoutes(r)
	return router.CheckRoutes(list, opts...)
}
