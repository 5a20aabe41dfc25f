// Package chi is the chi (github.com/go-chi/chi/v5) adapter of ratelimit:
// nethttp's middleware with chi's route patterns. Every status code, header
// field and body is nethttp's (its Gate decides and writes); this package
// only finds the route pattern.
//
// Documentation imports it under the alias ratelimit:
//
//	import ratelimit "github.com/sluicehq/ratelimit/chi"
//
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(100), FailMode: core.FailOpen})
//	…
//	r := chi.NewRouter()
//	r.Use(ratelimit.Middleware(lim))
//
// # Options
//
// Option is nethttp.Option, and every With function of nethttp has its
// twin here (WithKey, WithCost, WithSkip, WithDryRun, WithHeaders,
// WithDenyHandler, WithErrorHandler, WithObserver, WithLimiterFunc,
// WithRoutes, WithLogger); nethttp's own work as well. A user kept in the
// request context by an authentication middleware is a key through
// keyfuncs.ContextUser or keyfuncs.ContextValue.
//
// The default key is keyfuncs.IP(), RemoteAddr only. Do not put chi's
// middleware.RealIP in front of the limiter: it sets RemoteAddr from
// True-Client-IP, X-Real-IP or X-Forwarded-For, whoever sent them, so every
// client chooses its own key. Behind proxies use keyfuncs.IP with
// keyfuncs.TrustedProxies instead.
//
// # Per-route limits
//
// Three ways, as in nethttp:
//
//   - A middleware with its own limiter on a route or group:
//     r.With(ratelimit.Middleware(loginLimiter)).Post("/login", h), or
//     r.Use inside r.Group or r.Route.
//   - One middleware with WithRoutes, keyed by chi route pattern
//     ("/users/{id}", "/api/items/{id}" inside r.Route("/api", …)): /users/1
//     and /users/2 share one limit, and a path no route matches uses the
//     default limiter, so requests cannot create limiters.
//   - WithLimiterFunc, a limiter chosen per request (plan tiers).
//
// chi runs a router's r.Use middlewares before it routes, when
// RouteContext(ctx).RoutePattern() is still empty. With WithRoutes, this
// package then asks the root router where the request goes (Routes.Find),
// one more route match per request; see RoutePattern. Placed on a group or
// a route, the middleware reads the pattern chi has already found.
package chi
