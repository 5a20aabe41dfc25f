// Package echo is the echo (github.com/labstack/echo/v4) adapter of
// ratelimit: nethttp's middleware with echo's route paths and context.
// Every status code, header field and body is nethttp's (its Gate decides
// and writes); this package only passes echo's request, response writer
// and route path, and keys from echo's context.
//
// Documentation imports it under the alias ratelimit:
//
//	import ratelimit "github.com/sluicehq/ratelimit/echo"
//
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(100), FailMode: core.FailOpen})
//	…
//	e := echo.New()
//	e.Use(ratelimit.Middleware(lim))
//
// # Options and keys
//
// Option is nethttp.Option, and every With function of nethttp has its
// twin here (WithKey, WithCost, WithSkip, WithDryRun, WithHeaders,
// WithDenyHandler, WithErrorHandler, WithObserver, WithLimiterFunc,
// WithLimitFunc, WithRoutes, WithCountIf, WithLogger, WithDelay,
// WithAlso); nethttp's own work as well.
//
// The default key is keyfuncs.IP(), RemoteAddr only. echo's c.RealIP()
// believes X-Forwarded-For and X-Real-IP from any client unless
// e.IPExtractor is set, so it is not the default; behind proxies use
// keyfuncs.IP with keyfuncs.TrustedProxies. To key by what an
// authentication middleware stored with c.Set, use MiddlewareWithKey with
// ContextKey (or any KeyFunc reading the echo.Context).
//
// # Refusals
//
// A refused request is answered by the middleware, which then returns nil:
// the bytes are nethttp's, and e.HTTPErrorHandler does not replace them.
//
// # Per-route limits
//
// Three ways, as in nethttp:
//
//   - A middleware with its own limiter on a route or group:
//     e.POST("/login", h, ratelimit.Middleware(loginLimiter)), or
//     e.Group("/api", ratelimit.Middleware(apiLimiter)).
//   - One middleware with WithRoutes, keyed by "[METHOD ]path" in echo's
//     syntax ("POST /login", "/users/:id", the c.Path() of the route):
//     /users/1 and /users/2 share one limit, and a path no route matches
//     uses the default limiter, so requests cannot create limiters. Use
//     e.Use, not e.Pre: Pre middlewares run before routing, when c.Path()
//     is empty. A pattern written "/users/{id}" panics at construction;
//     one that matches no route, or the middleware in e.Pre, is logged at
//     the first request.
//   - WithLimiterFunc, a limiter chosen per request (plan tiers). It sees
//     the *http.Request, not the echo context: an authentication middleware
//     that knows the plan puts it in the request's context
//     (c.SetRequest(c.Request().WithContext(ctx))).
package echo
