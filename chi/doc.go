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
// WithLimitFunc, WithRoutes, WithCountIf, WithLogger, WithDelay,
// WithAlso); nethttp's own work as well. A user kept in the
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
//   - One middleware with WithRoutes, keyed by "[METHOD ]pattern" in chi's
//     syntax ("POST /login", "/users/{id}", "/api/items/{id}" inside
//     r.Route("/api", …)): /users/1 and /users/2 share one limit, and a
//     path no route matches uses the default limiter, so requests cannot
//     create limiters. A pattern written "/users/:id" panics at
//     construction; one that matches no route of the router ("/logni") is
//     logged at the first request.
//   - WithLimiterFunc, a limiter chosen per request (plan tiers).
//
// chi runs a router's r.Use middlewares before it routes, when
// RouteContext(ctx).RoutePattern() is still empty. With WithRoutes, this
// package then asks the root router where the request goes (Routes.Find),
// one more route match per request; see RoutePattern. Placed on a group or
// a route, the middleware reads the pattern chi has already found. The
// limit follows the route the request reaches: through mounted
// sub-routers, and through middleware.StripSlashes, RedirectSlashes and
// CleanPath wherever they run (so "/login/" and "//login" count as
// "/login"). Another middleware that rewrites the path after the limiter
// is not followed: put the limiter after it.
package chi
