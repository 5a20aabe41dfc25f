// Package gin is the gin (github.com/gin-gonic/gin) adapter of ratelimit:
// nethttp's middleware with gin's route paths and context. Every status
// code, header field and body is nethttp's (its Gate decides and writes);
// this package only passes gin's request, response writer and route path,
// keys from gin's context, and aborts the chain after a refusal.
//
// Documentation imports it under the alias ratelimit:
//
//	import ratelimit "github.com/sluicehq/ratelimit/gin"
//
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(100), FailMode: core.FailOpen})
//	…
//	r := gin.New()
//	r.Use(ratelimit.Middleware(lim))
//
// # Options and keys
//
// Option is nethttp.Option, and every With function of nethttp has its
// twin here (WithKey, WithCost, WithSkip, WithDryRun, WithHeaders,
// WithDenyHandler, WithErrorHandler, WithObserver, WithLimiterFunc,
// WithLimitFunc, WithRoutes, WithCountIf, WithLogger, WithDelay,
// WithAlso); nethttp's own work as well.
//
// The default key is keyfuncs.IP(), RemoteAddr only, not gin's
// c.ClientIP(), which believes forwarding headers from every peer unless
// the engine's trusted proxies are set; behind proxies use keyfuncs.IP
// with keyfuncs.TrustedProxies. To key by what an authentication
// middleware stored with c.Set, use MiddlewareWithKey with ContextKey (or
// any KeyFunc reading the *gin.Context).
//
// # Refusals
//
// A refused request is answered by the middleware, which then calls
// c.Abort(): the handlers after it do not run, and the bytes are nethttp's.
//
// # Per-route limits
//
// Three ways, as in nethttp:
//
//   - A middleware with its own limiter on a route or group:
//     r.POST("/login", ratelimit.Middleware(loginLimiter), h), or
//     r.Group("/api", ratelimit.Middleware(apiLimiter)).
//   - One middleware with WithRoutes, keyed by "[METHOD ]path" in gin's
//     syntax ("POST /login", "/users/:id", the c.FullPath() of the route):
//     /users/1 and /users/2 share one limit, and a path no route matches
//     uses the default limiter, so requests cannot create limiters. A
//     pattern written "/users/{id}" panics at construction; one that
//     matches no route of the engine is logged at the first request
//     served through an http.Server.
//   - WithLimiterFunc, a limiter chosen per request (plan tiers). It sees
//     the *http.Request, not the gin context: an authentication middleware
//     that knows the plan puts it in the request's context
//     (c.Request = c.Request.WithContext(ctx)).
package gin
