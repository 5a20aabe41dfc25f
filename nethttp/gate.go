package nethttp

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Gate is the whole HTTP behaviour of rate limiting, built once from a
// limiter and options: key → limiter → decision → header fields → refusal.
// Middleware is a Gate around a handler; the chi, echo and gin adapters
// call a Gate too, so every router sends the same status codes, header
// fields and bodies; and a handler that works out the key itself limits
// with Gate.DecideKey.
//
// A Gate is safe for concurrent use. Build it once (at startup) and share
// it: construction validates the options and precomputes header values.
//
// An adapter for another router is a few lines around one call:
//
//	type Option = nethttp.Option
//
//	func WithKey(k keyfuncs.KeyFunc) Option { return nethttp.WithKey(k) }
//
//	func Middleware(l *core.Limiter, opts ...Option) gin.HandlerFunc {
//		g := nethttp.NewGate(l, opts...)
//		return func(c *gin.Context) {
//			if !g.DecideRoute(c.Writer, c.Request, c.FullPath()) {
//				c.Abort()
//				return
//			}
//			c.Next()
//		}
//	}
type Gate struct {
	config
	def        *core.Limiter
	defHeaders *policyHeaders
	table      routeTable                       // WithRoutes; nil without
	known      map[*core.Limiter]*policyHeaders // routes' limiters; read-only
	router     string                           // ForRouter's name; "" for net/http

	// Whether the WithRoutes patterns were checked against the router.
	routesChecked atomic.Bool
	routesMu      sync.Mutex

	// Requests that could not be rate limited since the last log line, and
	// when that line was written (monotonic ns since gateEpoch).
	failures atomic.Int64
	lastLog  atomic.Int64

	// Limiters returned by WithLimiterFunc, up to maxDynamic of them.
	dynamic      sync.Map // *core.Limiter → *policyHeaders
	dynamicCount atomic.Int64
}

// maxDynamic bounds the limiters from WithLimiterFunc whose header values
// a Gate keeps; beyond it they are formatted per response.
const maxDynamic = 64

// NewGate returns the Gate of limiter l with opts applied, then the
// defaults filled in (see each With function). It panics if l is nil or an
// option is nil or was given nil.
func NewGate(l *core.Limiter, opts ...Option) *Gate {
	if l == nil {
		panic("nethttp: nil *core.Limiter")
	}
	g := &Gate{def: l}
	for _, o := range opts {
		if o == nil {
			panic("nethttp: nil Option")
		}
		o(&g.config)
	}
	if g.key == nil {
		g.key = keyfuncs.IP()
	}
	if g.deny == nil {
		g.deny = DefaultDenyHandler
	}
	if g.onError == nil {
		g.onError = DefaultErrorHandler
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	g.table = newRouteTable(g.routes)
	if g.table == nil {
		g.mux = nil
	}
	g.defHeaders = newPolicyHeaders(l.Limit(), l.Name())
	g.known = make(map[*core.Limiter]*policyHeaders, len(g.routes))
	for _, rl := range g.routes {
		if g.known[rl] == nil {
			g.known[rl] = newPolicyHeaders(rl.Limit(), rl.Name())
		}
	}
	g.routes = nil // in g.table
	return g
}

// Decide applies the gate to a net/http request and reports whether the
// caller should go on to the next handler. When it returns false it has
// written the whole response (429, 503, 400 or 500, or whatever the
// DenyHandler or ErrorHandler wrote); the caller must write nothing more.
// When it returns true it has only set header fields.
//
// The route for WithRoutes is the pattern the WithServeMux mux routes r
// to, or else r.Pattern.
func (g *Gate) Decide(w http.ResponseWriter, r *http.Request) bool {
	ok, _ := g.beginMux(w, r, g.mux)
	return ok
}

// beginMux is Begin with the route found by mux, when not nil: the mux
// the middleware wraps, or WithServeMux's. It checks the WithRoutes
// patterns against mux at the first request.
func (g *Gate) beginMux(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) (bool, Charge) {
	if g.table == nil {
		return g.Begin(w, r, "", nil)
	}
	g.checkRoutes(func() ([]string, string, bool) {
		switch {
		case mux != nil:
			return g.table.unmatched(func(method, path string) bool { return muxHas(mux, method, path) }), "", true
		case r.Pattern == "":
			return nil, "the middleware runs before a ServeMux routes the request (Request.Pattern is empty): " +
				"wrap the ServeMux itself, pass it to WithServeMux, or wrap each handler", true
		}
		return nil, "", true // wrapped handler by handler: the mux is unknown
	})
	route := r.Pattern
	if mux != nil {
		route = muxPattern(mux, r)
	}
	return g.Begin(w, r, route, nil)
}

// DecideRoute is Decide with the route pattern given by the caller: an
// adapter passes its router's pattern (chi's RoutePattern, echo's c.Path(),
// gin's c.FullPath()), or "" when there is none. route is only looked up in
// WithRoutes; the key still comes from the Gate's KeyFunc.
func (g *Gate) DecideRoute(w http.ResponseWriter, r *http.Request, route string) bool {
	ok, _ := g.Begin(w, r, route, nil)
	return ok
}

// DecideRouteKey is DecideRoute with the key from key instead of the
// Gate's KeyFunc, for adapters offering router-native keys (a user that an
// authentication middleware stored in echo's or gin's context). key runs
// only for a request WithSkip does not exempt; its error, or an empty key,
// goes to the ErrorHandler as a KeyFunc's would. A client address belongs
// to keyfuncs.IP and its trust options, never to a router's helper that
// believes forwarding headers from any client (echo's c.RealIP(), gin's
// c.ClientIP() as they come configured).
func (g *Gate) DecideRouteKey(w http.ResponseWriter, r *http.Request, route string, key func() (string, error)) bool {
	ok, _ := g.Begin(w, r, route, key)
	return ok
}

// Begin is DecideRoute (key nil) or DecideRouteKey that also returns what
// it took, for adapters supporting WithCountIf: unless the Charge is zero,
// the adapter passes it to Settle with the response's status once the
// handler has run.
func (g *Gate) Begin(w http.ResponseWriter, r *http.Request, route string, key func() (string, error)) (bool, Charge) {
	if g.skip != nil && g.skip(r) {
		return true, Charge{}
	}
	var k string
	var err error
	if key == nil {
		k, err = g.key(r)
	} else {
		k, err = key()
	}
	return g.decide(w, r, route, k, err)
}

// DecideKey limits inside a handler: it decides for key, which the handler
// has worked out itself (a username read from a JSON body, say), and
// answers as Middleware would. When it returns false it has written the
// whole response (429 with the header fields, Retry-After and a problem
// document, or 503, or 400 for an empty key) and the handler must write
// nothing more; when it returns true it has set the header fields, and the
// handler goes on. Every option of g applies but WithKey; WithRoutes looks
// up r.Pattern. Build g once, at startup, with NewGate.
func (g *Gate) DecideKey(w http.ResponseWriter, r *http.Request, key string) bool {
	if g.skip != nil && g.skip(r) {
		return true
	}
	ok, _ := g.decide(w, r, r.Pattern, key, nil)
	return ok
}

func (g *Gate) decide(w http.ResponseWriter, r *http.Request, route, key string, err error) (bool, Charge) {
	if err == nil && key == "" {
		err = core.ErrEmptyKey
	}
	if err != nil {
		return g.fail(w, r, &keyError{err}), Charge{}
	}
	lim := g.limiterFor(r, route)
	n := 1
	if g.cost != nil {
		n = g.cost(r)
	}
	res, err := lim.AllowN(r.Context(), key, n)
	if err != nil {
		return g.fail(w, r, err), Charge{}
	}
	if g.observe != nil {
		g.observe(r, res, nil, g.dryRun)
	}
	h := w.Header()
	if !res.Degraded && g.style != HeadersNone {
		setRateLimit(h, g.style, g.headersFor(lim), &res, g.now)
	}
	if res.Allowed || g.dryRun {
		if g.countIf != nil && res.Allowed && !res.Degraded && !g.dryRun {
			return true, Charge{lim: lim, key: key, n: n}
		}
		return true, Charge{}
	}
	setRetryAfter(h, &res)
	g.deny(w, r, res)
	return false, Charge{}
}

// fail handles a request that could not be decided.
func (g *Gate) fail(w http.ResponseWriter, r *http.Request, err error) bool {
	if g.observe != nil {
		g.observe(r, core.Result{}, err, g.dryRun)
	}
	g.logFailure(err)
	if g.dryRun {
		return true
	}
	g.onError(w, r, err)
	return false
}

// limiterFor picks the limiter: the route's, then WithLimiterFunc's, then
// the default. Routes are matched by pattern only, so no request can make
// the set of limiters grow.
func (g *Gate) limiterFor(r *http.Request, route string) *core.Limiter {
	if g.table != nil && route != "" {
		if l := g.table.lookup(r.Method, route); l != nil {
			return l
		}
	}
	if g.pick != nil {
		if l := g.pick(r); l != nil {
			return l
		}
	}
	return g.def
}

// headersFor returns the header values precomputed for lim, or nil past
// maxDynamic limiters from WithLimiterFunc.
func (g *Gate) headersFor(lim *core.Limiter) *policyHeaders {
	if lim == g.def {
		return g.defHeaders
	}
	if ph := g.known[lim]; ph != nil {
		return ph
	}
	return g.dynamicHeaders(lim)
}

func (g *Gate) dynamicHeaders(lim *core.Limiter) *policyHeaders {
	if v, ok := g.dynamic.Load(lim); ok {
		return v.(*policyHeaders)
	}
	if g.dynamicCount.Add(1) > maxDynamic {
		return nil
	}
	v, _ := g.dynamic.LoadOrStore(lim, newPolicyHeaders(lim.Limit(), lim.Name()))
	return v.(*policyHeaders)
}

// gateEpoch anchors the monotonic clock of failure logs.
var gateEpoch = time.Now()

// logInterval is the least time between two failure log lines of a Gate.
const logInterval = 10 * time.Second

// logFailure logs at most one line per logInterval about requests that
// could not be rate limited. The error's kind is logged, never its text
// when it could carry client input: keyfuncs errors name what was missing
// (header names, reasons), not what the client sent.
func (g *Gate) logFailure(err error) {
	n := g.failures.Add(1)
	now := int64(time.Since(gateEpoch))
	last := g.lastLog.Load()
	if (last != 0 && now-last < int64(logInterval)) || !g.lastLog.CompareAndSwap(last, now) {
		return
	}
	g.failures.Add(-n)
	kind := "key"
	if !errors.Is(err, ErrKey) {
		kind = "cost"
	}
	g.logger.Warn("ratelimit: requests could not be rate limited",
		"kind", kind, "count", n, "error", err.Error())
}
