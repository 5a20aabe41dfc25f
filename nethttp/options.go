package nethttp

import (
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Option configures Middleware or NewGate. Options are applied in order,
// then every setting left unset gets the default its With function names.
// A nil Option, or a With function given nil, panics at construction: it is
// a programmer error, not something to discover on the first request.
//
// Adapters for other routers declare `type Option = nethttp.Option` and
// reuse these functions, so every router has the same options.
type Option func(*config)

type config struct {
	key     keyfuncs.KeyFunc
	keySet  bool // by WithKey, not the default
	cost    func(*http.Request) int
	skip    func(*http.Request) bool
	deny    DenyHandler
	onError ErrorHandler
	observe func(*http.Request, core.Result, error, bool)
	style   HeaderStyle
	dryRun  bool
	pick    func(*http.Request) *core.Limiter
	routes  map[string]*core.Limiter
	mux     *http.ServeMux
	now     func() time.Time
	logger  *slog.Logger
	countIf func(*http.Request, int) bool
	limitOf func(*http.Request) (core.Limit, error)
	delay   time.Duration // WithDelay
	room    *room         // WithDelay's waiting room
	also    []alsoCheck   // WithAlso
}

// WithKey sets how a request is turned into the key of its bucket. Default
// keyfuncs.IP(keyfuncs.Logger(l)), l being WithLogger's: the client
// address from RemoteAddr. A key error, or an
// empty key, goes to the ErrorHandler (400 by default), never to a shared
// bucket.
func WithKey(k keyfuncs.KeyFunc) Option {
	mustNotBeNil(k == nil, "WithKey")
	return func(c *config) { c.key, c.keySet = k, true }
}

// WithCost sets how many tokens a request spends. Default 1 for every
// request. A cost below 1 or above the limit's burst is a bug in f: the
// request gets the ErrorHandler (500 by default). To let a request through
// without counting it, use WithSkip.
func WithCost(f func(*http.Request) int) Option {
	mustNotBeNil(f == nil, "WithCost")
	return func(c *config) { c.cost = f }
}

// WithSkip exempts the requests for which f returns true (health checks,
// allowlists): they get no key, no decision and no headers. Default: no
// request is skipped.
func WithSkip(f func(*http.Request) bool) Option {
	mustNotBeNil(f == nil, "WithSkip")
	return func(c *config) { c.skip = f }
}

// WithDenyHandler replaces the response to a refused request. Default
// DefaultDenyHandler (429, or 503 when the limiter's FailMode refused).
// The header fields are set before h runs.
func WithDenyHandler(h DenyHandler) Option {
	mustNotBeNil(h == nil, "WithDenyHandler")
	return func(c *config) { c.deny = h }
}

// WithErrorHandler replaces the response to a request that could not be
// rate limited (key error, invalid cost). Default DefaultErrorHandler
// (400 for key errors, 500 otherwise).
func WithErrorHandler(h ErrorHandler) Option {
	mustNotBeNil(h == nil, "WithErrorHandler")
	return func(c *config) { c.onError = h }
}

// WithObserver calls f once for every request that is not skipped, before
// any response is written: with the decision, or with the error the
// ErrorHandler is about to receive (res then holds only the Name and
// Limit of the limiter the request went to: the middleware's default
// one for a key error, which comes before any limiter is chosen). dryRun reports
// WithDryRun: a refusal (!res.Allowed) or an error did not stop the
// request, so one observer counts both modes right (metrics.Collector's
// HTTPObserver does). It serves metrics and logging, and shows what
// dry-run mode would have refused. f runs on the request's goroutine: keep
// it fast. Default: none.
func WithObserver(f func(r *http.Request, res core.Result, err error, dryRun bool)) Option {
	mustNotBeNil(f == nil, "WithObserver")
	return func(c *config) { c.observe = f }
}

// WithHeaders selects the rate-limit header fields. Default HeadersDraft06.
// It panics on a style that is not one of the constants.
func WithHeaders(style HeaderStyle) Option {
	if style < HeadersDraft06 || style > HeadersNone {
		panic("nethttp: WithHeaders: unknown " + style.String())
	}
	return func(c *config) { c.style = style }
}

// WithDryRun decides and counts every request and sends the header fields,
// but never refuses one: a denial, a key error or an invalid cost lets the
// request through (no Retry-After, no DenyHandler, no ErrorHandler). Use it
// with WithObserver to see what a limit would do before enforcing it.
func WithDryRun() Option {
	return func(c *config) { c.dryRun = true }
}

// WithLimiterFunc chooses the limiter per request, for example by plan tier
// from an authenticated user. f returning nil means the default limiter
// (the one given to Middleware or NewGate). A route in WithRoutes takes
// precedence over f. Return limiters made once at startup, not per request:
// header values are precomputed for the first 64 distinct limiters seen.
func WithLimiterFunc(f func(*http.Request) *core.Limiter) Option {
	mustNotBeNil(f == nil, "WithLimiterFunc")
	return func(c *config) { c.pick = f }
}

// WithLimitFunc sets the limit of each request, read per request (a
// tenant's own quota from a database, say): the request is decided under
// f's limit by the limiter chosen for it (WithLimiterFunc's or the
// default), in that limiter's buckets (its Name, so what a key has
// spent carries over when its limit changes; see
// core.Limiter.AllowLimit), and the header fields show that limit. An
// error from f, or a limit core.Limiter.AllowLimit refuses (a zero Rate,
// a cost above its burst), goes to the ErrorHandler (500 by default),
// never to a default limit. f runs for each request WithSkip does not
// exempt, after the key: keep it fast (cache what it reads). Default:
// the limiter's own limit.
//
// A route with its own limiter (WithRoutes) keeps its own limit: f is not
// asked for its requests, so a stricter route ("POST /v1/export" at 5 a
// minute) is never replaced by a tenant's larger quota.
func WithLimitFunc(f func(r *http.Request) (core.Limit, error)) Option {
	mustNotBeNil(f == nil, "WithLimitFunc")
	return func(c *config) { c.limitOf = f }
}

// WithRoutes overrides the limiter per route: a key is "[METHOD ]path",
// the path a route pattern in the router's own syntax, as registered
// ("POST /login", "/users/{id}" for net/http and chi, "GET /users/:id" for
// echo and gin; a sub-router's or group's routes with its prefix). Without
// a method, the limit applies to every method of the route; "GET" covers
// HEAD too. /users/1 and /users/2 share one limit instead of making one
// bucket per id. A route's limiter decides under its own limit, never
// WithLimitFunc's. Requests whose route has no entry (or none, a 404) use
// WithLimiterFunc, then the default limiter. The map is copied. Calling
// WithRoutes again adds to the routes.
//
// The limit follows the route the router reaches, wherever the middleware
// runs. With net/http, wrap the ServeMux itself (Middleware(…)(mux)), pass
// it to WithServeMux when other middleware stands between, or wrap each
// handler; a ServeMux the mux hands requests to as they are is followed,
// one behind http.StripPrefix is not (wrap that one instead).
//
// No pattern is silently ignored: WithRoutes panics on a pattern that is
// not "[METHOD ]path" (a lower-case method, no "/", "/users/{id}" given to
// echo or gin, "/users/:id" to net/http or chi) or on a nil limiter; and at
// the first request the middleware logs, at error level and once, the
// patterns that match no route of the router, or that the middleware sits
// where routes are not known yet (before net/http's ServeMux without
// WithServeMux, in echo's e.Pre, outside chi). Routes are checked wherever
// the router is known: always with chi and echo; with net/http when the
// middleware wraps the ServeMux or has WithServeMux; with gin when the
// engine is the Handler of the http.Server serving the request.
func WithRoutes(routes map[string]*core.Limiter) Option {
	mustNotBeNil(routes == nil, "WithRoutes")
	for p, l := range routes {
		if l == nil {
			panic("nethttp: WithRoutes: nil *core.Limiter for pattern " + strconv.Quote(p))
		}
		if _, _, err := splitPattern(p); err != nil {
			panic("nethttp: WithRoutes: pattern " + strconv.Quote(p) + ": " + err.Error())
		}
	}
	routes = maps.Clone(routes)
	return func(c *config) {
		if c.routes == nil {
			c.routes = make(map[string]*core.Limiter, len(routes))
		}
		maps.Copy(c.routes, routes)
	}
}

// WithServeMux tells a middleware that runs before mux routes the request
// where it will go: Request.Pattern is still empty there, so the Gate asks
// mux.Handler(r) for the pattern (and a ServeMux mux hands the request to
// as it is), and checks every WithRoutes pattern against mux's routes.
// Middleware wrapping mux itself needs no WithServeMux; give it when other
// middleware stands between (Middleware(…)(logging(mux))). That is one
// more route match per request; wrapping each handler instead costs
// nothing. Used with WithRoutes, and for CORS preflights: one that mux
// routes nowhere goes through uncounted (see Middleware).
func WithServeMux(mux *http.ServeMux) Option {
	mustNotBeNil(mux == nil, "WithServeMux")
	return func(c *config) { c.mux = mux }
}

// withClock sets the clock HeadersLegacy reads for X-RateLimit-Reset;
// default time.Now. Only this package's tests need it (export_test.go).
func withClock(now func() time.Time) Option {
	mustNotBeNil(now == nil, "WithClock")
	return func(c *config) { c.now = now }
}

func mustNotBeNil(isNil bool, name string) {
	if isNil {
		panic("nethttp: " + name + "(nil)")
	}
}

// WithLogger sets where requests that could not be rate limited are
// reported: a key error (e.g. a trusted proxy sending no forwarding header,
// an API-key header missing) or a cost the limiter refuses. At most one
// warning per 10 seconds is logged, with how many such requests there were;
// no client-supplied text is logged. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("nethttp: WithLogger(nil)")
	}
	return func(c *config) { c.logger = l }
}
