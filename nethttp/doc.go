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
//   - No key (the KeyFunc failed): 400 Bad Request, a problem body naming
//     what is missing (a header, the client address, the user), never
//     what the client sent. A key function that returns "" without an
//     error, or a cost the limiter can never allow (below 1, above the
//     burst: a bug in WithCost), is the server's bug: 500, logged. WithErrorHandler replaces both. No error's text ever reaches
//     the client.
//
// WithSkip exempts requests (health checks); WithDryRun decides and sends
// the fields but refuses nothing; WithObserver sees every decision.
// ExposedHeaders lists the fields a CORS configuration, which must run
// before the limiter, exposes to JavaScript. A CORS preflight (OPTIONS with
// Origin and Access-Control-Request-Method) goes through uncounted only
// where the router says no route serves OPTIONS at its path (see
// Chain.NoOptionsRoute): any client can send those fields, so one that
// would reach a handler is decided like any request.
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
// override comes first, then the function, then the default limiter; a
// route override keeps its own limit even with WithLimitFunc, which sets
// the limit of the others.
// A pattern is "[METHOD ]path" in the router's own syntax ("POST /login",
// "/users/{id}" for every method), the same in every adapter. Wrapped
// around a ServeMux, the middleware asks the mux where the request goes;
// wrapped around each handler, it reads Request.Pattern. A pattern that
// can never apply panics at construction (wrong syntax) or is logged once
// at the first request (no such route, or the middleware placed where
// routes are not known); see WithRoutes. CheckRoutes (and each adapter's)
// reports the patterns that match no route as an error, for a check at
// startup or in a test.
//
// Several keys at once (a client, its tenant, a route's ceiling):
// WithAlso adds a check to the middleware's own, and the request is
// decided in one core.AllowAll, all or nothing; chained middlewares would
// cost a store call each, and a refusal by the last would have charged
// the first.
//
// # Limiting inside a handler
//
// When the key is known only inside the handler (a username read from a
// JSON body, an account found in the database), build a Gate once with
// NewGate and serve the rest of the handler with Gate.ServeKey: the same
// decision, header fields, 429 and problem document as the middleware's,
// and every option but WithKey (the key given replaces it), WithCountIf's
// settlement included.
//
//	attempts := ratelimit.NewGate(loginLimiter, ratelimit.WithCountIf(failed)) // at startup
//	…
//	attempts.ServeKey(w, r, "user:"+body.Username, checkPassword)
//
// It works in any router's handler: pass echo's c.Response() and
// c.Request(), or gin's c.Writer and c.Request.
//
// # Adapters
//
// An adapter builds one Gate at construction with Router.NewGate, which
// checks the WithRoutes patterns against the router's syntax, and calls
// Gate.Serve per request with the router's response writer and request,
// and a Chain: Next runs the rest of the router's chain on the writer it
// is given, Route gives the route pattern, Routes lists the routes for a
// check at the first request, NoOptionsRoute says that no route serves a
// CORS preflight (else it is counted), Key a router-native key. When Serve returns
// false the response is written and the adapter stops the chain. It
// declares `type Option = nethttp.Option` and so offers every option of
// this package. For a router whose middleware is func(http.Handler)
// http.Handler:
//
//	var router = nethttp.Router{Name: "myrouter", ColonParams: true}
//
//	func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
//		g := router.NewGate(l, opts...)
//		return func(next http.Handler) http.Handler {
//			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//				g.Serve(w, r, nethttp.Chain{
//					Route: func() string { return myrouter.Pattern(r) },
//					Next: func(w http.ResponseWriter) int {
//						next.ServeHTTP(w, r)
//						return http.StatusOK
//					},
//				})
//			})
//		}
//	}
//
// A router with a context of its own installs Next's writer as the
// context's writer when it is not the one Serve was given (WithCountIf
// then needs the status), as the gin adapter does, or returns the status
// its error handling will write, as the echo adapters do; and calls its
// own abort when Serve returns false.
//
// # Performance
//
// Header values that depend only on the limit are formatted once, small
// integers come from a table, and header slices are assigned directly
// under canonical keys. With the memory store and a key function that
// does not allocate, the allowed path costs one allocation in the default
// style: the array the response's header values live in, so that no
// response shares them with another; none with HeadersNone, two with
// HeadersDraft11 (its RateLimit value is formatted per response) and
// HeadersLegacy; keyfuncs.IP adds one for the key (see
// BenchmarkMiddlewareAllowed and TestAllowedAllocs).
package nethttp

//go:generate go run ../internal/genoptions ..
