// Package nethttp is the net/http middleware of ratelimit, and the one
// place where its HTTP behaviour lives: the chi, echo and gin adapters
// call this package's Gate, so every router answers alike.
//
// Documentation imports it under the alias ratelimit:
//
//	import ratelimit "github.com/sluicehq/ratelimit/nethttp"
//
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(100), FailMode: core.FailOpen})
//	…
//	http.ListenAndServe(":8080", ratelimit.Middleware(lim)(mux))
//
// # What a request gets
//
// A request's key (WithKey; default keyfuncs.IP(), the client address)
// spends its cost (WithCost; default 1) from the key's bucket:
//
//   - Allowed: the rate-limit header fields (WithHeaders; default the
//     IETF draft-06 RateLimit-* fields), then the next handler.
//   - Refused: 429 Too Many Requests with the fields, Retry-After and an
//     RFC 9457 application/problem+json body (WithDenyHandler replaces it).
//   - Store down and the limiter core.FailClosed: 503 Service Unavailable
//     with Retry-After and a problem body. A degraded decision (the store
//     could not decide and core.FailMode did) never carries RateLimit
//     fields, whose numbers would be fiction.
//   - No key (the KeyFunc failed or gave ""): 400 Bad Request, a problem
//     body saying the rate-limit key is missing or invalid. A cost the
//     limiter can never allow (below 1, above the burst: a bug in WithCost)
//     gets 500. WithErrorHandler replaces both. No error's text ever reaches
//     the client.
//
// WithSkip exempts requests (health checks); WithDryRun decides and sends
// the fields but refuses nothing; WithObserver sees every decision.
//
// # Header fields
//
// Retry-After is whole seconds, rounded up, at least 1, on 429 and 503
// only. HeaderStyle documents each style's fields; for core.PerMinute(3)
// after one request (a token every 20 s):
//
//	HeadersDraft06  RateLimit-Limit: 3, RateLimit-Remaining: 2, RateLimit-Reset: 20, RateLimit-Policy: 3;w=60
//	HeadersDraft11  RateLimit-Policy: "3-per-1m0s";q=3;w=60, RateLimit: "3-per-1m0s";r=2;t=20
//	HeadersLegacy   X-RateLimit-Limit: 3, X-RateLimit-Remaining: 2, X-RateLimit-Reset: <Unix seconds>
//	HeadersNone     nothing
//
// # Which limit
//
// Per route, three ways: a middleware with its own limiter around each
// route or group; WithRoutes, overrides by route pattern ("GET
// /users/{id}", never the raw path, which would make a bucket per id);
// and WithLimiterFunc, a limiter chosen per request (plan tiers). A route
// override comes first, then the function, then the default limiter.
// A pattern is "[METHOD ]path" in the router's own syntax ("POST /login",
// "/users/{id}" for every method), the same in every adapter. Wrapped
// around a ServeMux, the middleware asks the mux where the request goes;
// wrapped around each handler, it reads Request.Pattern. A pattern that
// can never apply panics at construction (wrong syntax) or is logged once
// at the first request (no such route, or the middleware placed where
// routes are not known); see WithRoutes.
//
// # Limiting inside a handler
//
// When the key is known only inside the handler (a username read from a
// JSON body, an account found in the database), build a Gate once with
// NewGate and call Gate.DecideKey there: the same decision, header
// fields, 429 and problem document as the middleware's.
//
//	attempts := ratelimit.NewGate(loginLimiter) // at startup
//	…
//	if !attempts.DecideKey(w, r, "user:"+body.Username) {
//		return // the 429 is written
//	}
//
// It works in any router's handler: pass echo's c.Response() and
// c.Request(), or gin's c.Writer and c.Request (then c.Abort()).
//
// # Adapters
//
// An adapter builds one Gate with NewGate at construction and calls
// Gate.DecideRoute (or Gate.DecideRouteKey, with a router-native key) per
// request, passing the router's response writer, request and route
// pattern; when it returns false the response is written and the adapter
// stops the chain. It declares `type Option = nethttp.Option` and so
// offers every option of this package. Gate.ForRouter, at construction,
// checks the WithRoutes patterns against the router's syntax, and
// Gate.CheckRoutes, at the first request, against its routes.
//
// # Performance
//
// Header values that depend only on the limit are formatted once, small
// integers come from a table, and header slices are assigned directly
// under canonical keys: with the memory store and a key function that
// does not allocate, the allowed path allocates nothing (see
// BenchmarkMiddlewareAllowed and TestAllowedAllocs).
package nethttp
