package nethttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/logline"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Gate is the whole HTTP behaviour of rate limiting, built once from a
// limiter and options: key → limiter → decision → header fields → refusal
// → the handler → WithCountIf's settlement. Middleware is a Gate around a
// handler; the chi, echo and gin adapters call a Gate too, so every router
// sends the same status codes, header fields and bodies; and a handler
// that works out the key itself limits with Gate.ServeKey.
//
// A Gate has two entry points, and every option applies to both but
// WithKey, which ServeKey's key replaces (a Gate given WithKey says so,
// once, at error level, at its first ServeKey): Serve for adapters,
// ServeKey for handlers. It is safe for concurrent
// use. Build it once (at startup) and share it: construction validates
// the options and formats the header values of every limiter it knows.
type Gate struct {
	config
	router  Router
	def     *core.Limiter
	headers map[*core.Limiter]*policyHeaders // the default's and WithRoutes'; read-only
	table   routeTable                       // WithRoutes; nil without

	// keyLogged: ServeKey reported that it ignores WithKey.
	keyLogged atomic.Bool

	// Whether the WithRoutes patterns were checked against the router.
	routesChecked atomic.Bool
	routesMu      sync.Mutex

	// The log line of requests that could not be rate limited (times:
	// monotonic ns since gateEpoch).
	failures logline.Line

	// Limiters returned by WithLimiterFunc, up to maxDynamic of them.
	dynamic      sync.Map // *core.Limiter → *policyHeaders
	dynamicCount atomic.Int64
}

// maxDynamic bounds the limiters from WithLimiterFunc whose header values
// a Gate keeps; beyond it they are formatted per response.
const maxDynamic = 64

// NewGate returns the Gate of limiter l with opts applied, then the
// defaults filled in (see each With function), for net/http: WithRoutes
// patterns are net/http's. An adapter for another router builds its Gate
// with Router.NewGate. It panics if l is nil, an option is nil or was
// given nil, or a WithRoutes pattern is not written as net/http's
// ServeMux writes patterns.
func NewGate(l *core.Limiter, opts ...Option) *Gate { return netHTTPRouter.NewGate(l, opts...) }

// NewGate is the Gate of l with opts for an adapter of rt: log lines name
// rt, and it also panics if a WithRoutes pattern is not written in rt's
// syntax (a pattern that can never match is found at startup rather than
// in production).
func (rt Router) NewGate(l *core.Limiter, opts ...Option) *Gate {
	if l == nil {
		panic("nethttp: nil *core.Limiter")
	}
	g := &Gate{router: rt, def: l, config: newConfig(opts)}
	if err := rt.checkSyntax(g.routes); err != nil {
		panic(err.Error())
	}
	g.table = newRouteTable(g.routes)
	g.checkDelay(l)
	g.checkAlso(l)
	g.headers = map[*core.Limiter]*policyHeaders{l: g.limiterHeaders(l)}
	for _, rl := range g.routes {
		g.checkDelay(rl)
		g.checkAlso(rl)
		if g.headers[rl] == nil {
			g.headers[rl] = g.limiterHeaders(rl)
		}
	}
	g.routes = nil // in g.table
	return g
}

// newConfig applies opts, then fills in the defaults.
func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o == nil {
			panic("nethttp: nil Option")
		}
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.key == nil {
		c.key = keyfuncs.IP(keyfuncs.Logger(c.logger))
	}
	if c.deny == nil {
		c.deny = DefaultDenyHandler
	}
	if c.onError == nil {
		c.onError = DefaultErrorHandler
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Chain is what only the router knows about one request, as an adapter
// hands it to Gate.Serve: the rest of the router's chain (Next, required)
// and, optionally, the route and the router's key.
type Chain struct {
	// Route returns the pattern of the route serving the request, as the
	// router reports it ("/users/{id}", "/users/:id"; net/http's may start
	// with a method), or "" when no route matches. The Gate calls it only
	// when WithRoutes gave it routes. nil: no route is known.
	Route func() string

	// Routes lists the router's routes, each "METHOD path" ("path" alone
	// for every method) as the router reports route patterns; or, in
	// misplaced, why the middleware cannot know the route of a request
	// where it runs ("it runs in e.Pre, before routing: give it to
	// e.Use"); or ok false when it cannot tell yet (a 404 told nothing).
	// The Gate calls it, only with WithRoutes, until it reports ok, and
	// then logs once, at error level, the patterns that match no route:
	// the cost is one atomic load per request. routes nil with misplaced
	// "" means the routes cannot be listed: nothing is checked. nil: never
	// checked.
	Routes func() (routes []string, misplaced string, ok bool)

	// NoOptionsRoute, if not nil, reports that no route of the router
	// serves r's path for OPTIONS: a CORS preflight (OPTIONS with Origin
	// and Access-Control-Request-Method) is then answered by what stands
	// before the routes (a CORS middleware) or by the router itself (404,
	// 405, an automatic OPTIONS answer), never by a handler of the app,
	// and the Gate lets it through uncounted. The Gate calls it only for a
	// preflight. nil: the router cannot tell, and a preflight is decided
	// like any request, so that no client reaches a handler uncounted by
	// sending a preflight's header fields.
	NoOptionsRoute func() bool

	// Key, if not nil, gives the request's key instead of the Gate's
	// KeyFunc: a router-native key (a user that an authentication
	// middleware stored in the router's context). It runs only for a
	// request WithSkip does not exempt; its error, or an empty key, is a
	// key error as a KeyFunc's would be.
	Key func() (string, error)

	// Next runs the rest of the chain, which writes its response to w:
	// Serve's w itself, or w wrapped so that WithCountIf sees the final
	// status, the connection hijacked, or a response written after Next
	// returned (install w as the router context's writer). It returns the
	// status the response gets if nothing more is written to w once Next
	// returns (200 for a net/http handler that wrote nothing); or 0 when
	// that is not known yet: the response is written to w later (a
	// router's error handler answering an error the handler left), or is
	// never seen (a hijacked connection): then the request counts, unless
	// a status written to w later says otherwise.
	Next func(w http.ResponseWriter) (status int)
}

// Serve is the entry point for adapters: it applies the Gate to the
// request r, answered through w (the router's response writer), and
// reports whether it ran ch.Next. When it returns false it has written the
// whole response (429, 503, 400 or 500, or whatever the DenyHandler or
// ErrorHandler wrote), and the adapter stops the chain; when it ran Next,
// it had set only header fields before. With WithCountIf, it settles the
// request's cost with the status of the response Next wrote (see
// WithCountIf).
func (g *Gate) Serve(w http.ResponseWriter, r *http.Request, ch Chain) bool {
	if g.exempt(r) || ch.NoOptionsRoute != nil && isPreflight(r) && ch.NoOptionsRoute() {
		ch.Next(w)
		return true
	}
	route := ""
	if g.table != nil {
		if ch.Routes != nil {
			g.checkRoutes(func() ([]string, string, bool) { return g.unmatchedIn(ch.Routes) })
		}
		if ch.Route != nil {
			route = ch.Route()
		}
	}
	var key string
	var err error
	if ch.Key != nil {
		key, err = ch.Key()
	} else {
		key, err = g.key(r)
	}
	ok, c := g.decide(w, r, route, key, err)
	if ok {
		g.serve(w, r, c, ch.Next)
	}
	return ok
}

// ServeKey is the entry point for handlers that work out the key
// themselves (a username read from a JSON body, an account found in the
// database): it decides for key and, when the request may go on, serves
// next with w, as Middleware would have; else it writes the refusal (429
// with the header fields, Retry-After and a problem document, or 503, or
// 500 for an empty key, the handler's bug) and next does not run. Every
// option of g applies, WithCountIf's settlement included, but WithKey:
// key replaces it, and a Gate given WithKey logs so, once, at error
// level, at its first ServeKey. WithRoutes looks up r.Pattern. It runs in
// a handler, so a CORS preflight is decided like any request. Build g
// once, at startup, with NewGate.
func (g *Gate) ServeKey(w http.ResponseWriter, r *http.Request, key string, next http.Handler) {
	if g.keySet && !g.keyLogged.Load() && g.keyLogged.CompareAndSwap(false, true) {
		g.logger.Error("ratelimit: Gate.ServeKey ignores the Gate's WithKey: the key it is given replaces it; build the Gate without WithKey",
			"router", g.router.Name)
	}
	if g.exempt(r) {
		next.ServeHTTP(w, r)
		return
	}
	if ok, c := g.decide(w, r, r.Pattern, key, nil); ok {
		g.serve(w, r, c, func(w http.ResponseWriter) int {
			next.ServeHTTP(w, r)
			return http.StatusOK
		})
	}
}

// exempt reports whether r goes through without a key or a decision:
// WithSkip's requests. (A CORS preflight goes through uncounted only where
// the router says no route serves it: Chain.NoOptionsRoute.)
func (g *Gate) exempt(r *http.Request) bool {
	return g.skip != nil && g.skip(r)
}

// isPreflight reports whether r is shaped as a CORS preflight: an OPTIONS
// request with Origin and Access-Control-Request-Method. A browser sends
// one before a cross-origin request it may not send unasked; counting it
// would charge the client twice per call, and refusing it (a 429 without
// CORS headers) would show the page a network error instead of the 429
// its real request would get. Any client can send these fields, so the
// shape alone exempts nothing: see Chain.NoOptionsRoute.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header["Origin"]) > 0 &&
		len(r.Header["Access-Control-Request-Method"]) > 0
}

// decide decides for key (or reports err) and writes the refusal; it
// returns whether the request goes on, and what WithCountIf may give back.
func (g *Gate) decide(w http.ResponseWriter, r *http.Request, route, key string, err error) (bool, charge) {
	if err != nil {
		return g.fail(w, r, policyOf(g.def), &keyError{err}), charge{}
	}
	if key == "" {
		return g.fail(w, r, policyOf(g.def), errEmptyKey), charge{}
	}
	var checks []core.Check // WithAlso's, after the Gate's own
	if g.also != nil {
		var policy core.Result
		if checks, policy, err = g.alsoKeys(r); err != nil {
			return g.fail(w, r, policy, err), charge{}
		}
	}
	lim, dl, perRequest, err := g.deciderFor(r, route)
	if err != nil {
		return g.fail(w, r, policyOf(lim), err), charge{}
	}
	n := 1
	if g.cost != nil {
		n = g.cost(r)
	}
	ctx := r.Context()
	if g.dryRun {
		ctx = core.WithDryRun(ctx) // metrics say "would deny", never "denied"
	}
	var res core.Result
	if checks != nil {
		res, err = g.allowAll(ctx, checks, dl, key, n)
	} else if res, err = dl.AllowN(ctx, key, n); err != nil && perRequest {
		err = &limitError{err}
	}
	if err != nil {
		return g.fail(w, r, policyOf(lim), err), charge{}
	}
	c := charge{lim: dl, key: key, n: n}
	if checks != nil {
		c.also = checks[1:]
	}
	if g.delay > 0 && !res.Allowed && !res.Degraded && res.RetryAfter <= g.delay {
		res = g.shape(ctx, r, c, res) // WithDelay: delay.go
	}
	return g.answer(w, r, lim, res, c)
}

// deciderFor returns the limiter for r (see limiterFor) and the one that
// decides: that limiter, or (perRequest) that limiter under
// WithLimitFunc's limit, never a route's: its own limit is never
// replaced. A limit that WithLimitFunc fails to give, or that is
// invalid, is a limitError.
func (g *Gate) deciderFor(r *http.Request, route string) (lim, dl *core.Limiter, perRequest bool, err error) {
	lim, routed := g.limiterFor(r, route)
	if g.limitOf == nil || routed {
		return lim, lim, false, nil
	}
	limit, err := g.limitOf(r)
	if err == nil {
		dl, err = lim.With(limit)
	}
	if err != nil {
		return lim, nil, true, &limitError{err}
	}
	return lim, dl, true, nil
}

// answer reports res to the observer, writes its fields, and writes the
// refusal; it returns whether the request goes on, and what WithCountIf
// may give back (c, for a request truly allowed).
func (g *Gate) answer(w http.ResponseWriter, r *http.Request, lim *core.Limiter, res core.Result, c charge) (bool, charge) {
	if g.observe != nil {
		g.observe(r, res, nil, g.dryRun)
	}
	h := w.Header()
	if !res.Degraded && g.style != HeadersNone {
		setRateLimit(h, g.style, g.headersFor(lim), &res, g.now)
	}
	if res.Allowed || g.dryRun {
		if g.countIf != nil && res.Allowed && !res.Degraded && !g.dryRun {
			return true, c
		}
		return true, charge{}
	}
	setRetryAfter(h, &res)
	g.deny(w, r, res)
	return false, charge{}
}

// fail handles a request that could not be decided; policy names the
// limiter it went to, for the observer.
func (g *Gate) fail(w http.ResponseWriter, r *http.Request, policy core.Result, err error) bool {
	if g.observe != nil {
		g.observe(r, policy, err, g.dryRun)
	}
	g.logFailure(err)
	if g.dryRun {
		return true
	}
	g.onError(w, r, err)
	return false
}

// policyOf is the Result an observer gets with an error: l's policy
// name and limit, nothing decided.
func policyOf(l *core.Limiter) core.Result { return core.Result{Limit: l.Limit(), Name: l.Name()} }

// limiterFor picks the limiter: the route's (routed), then
// WithLimiterFunc's, then the default. Routes are matched by pattern only,
// so no request can make the set of limiters grow.
func (g *Gate) limiterFor(r *http.Request, route string) (lim *core.Limiter, routed bool) {
	if g.table != nil && route != "" {
		if l := g.table.lookup(r.Method, route); l != nil {
			return l, true
		}
	}
	if g.pick != nil {
		if l := g.pick(r); l != nil {
			return l, false
		}
	}
	return g.def, false
}

// headersFor returns the header values of lim, formatted at construction
// for the limiters the Gate was given and at first sight for
// WithLimiterFunc's; nil past maxDynamic of those.
func (g *Gate) headersFor(lim *core.Limiter) *policyHeaders {
	if ph := g.headers[lim]; ph != nil {
		return ph
	}
	if v, ok := g.dynamic.Load(lim); ok {
		return v.(*policyHeaders)
	}
	if g.dynamicCount.Add(1) > maxDynamic {
		return nil
	}
	v, _ := g.dynamic.LoadOrStore(lim, g.limiterHeaders(lim))
	return v.(*policyHeaders)
}

// gateEpoch anchors the monotonic clock of failure logs.
var gateEpoch = time.Now()

// logInterval is the least time between two failure log lines of a Gate.
const logInterval = 10 * time.Second

// logFailure logs at most one line per logInterval about requests that
// could not be rate limited: the error's kind, and its text only where it
// cannot carry client input (see loggable).
func (g *Gate) logFailure(err error) {
	n, due := g.failures.Count(int64(time.Since(gateEpoch)), int64(logInterval))
	if !due {
		return
	}
	var le *limitError
	var ae *alsoError
	kind := "cost"
	switch {
	case errors.Is(err, ErrKey):
		kind = "key"
	case errors.As(err, &ae):
		kind = "checks"
	case errors.As(err, &le):
		kind = "limit"
	case err == errEmptyKey:
		kind = "empty key"
	}
	g.logger.Warn("ratelimit: requests could not be rate limited",
		"kind", kind, "count", n, "error", loggable(err))
}

// keyfuncsErrors are the errors of package keyfuncs, whose text carries
// no client input (at most a header name the server configured).
var keyfuncsErrors = []error{
	keyfuncs.ErrMissingHeader, keyfuncs.ErrRepeatedHeader, keyfuncs.ErrValueTooLong, keyfuncs.ErrInvalidAddr,
	keyfuncs.ErrInvalidForwarding, keyfuncs.ErrUnidentifiedClient, keyfuncs.ErrNoUser, keyfuncs.ErrEmptyKey,
}

// loggable is the text logged for err, which holds no client input: a
// key function's error is named by the keyfuncs error it matches (and
// the header it names), else by its type only, since a KeyFunc of the
// user's may put what the client sent in its text; likewise a
// WithLimitFunc function's error, unless it is core's. The cost errors
// and the empty key are core's and this package's own text.
func loggable(err error) string {
	var ke *keyError
	if errors.As(err, &ke) {
		for _, s := range keyfuncsErrors {
			if errors.Is(ke.err, s) {
				var h interface{ Header() string }
				if errors.As(ke.err, &h) {
					return ErrKey.Error() + ": " + s.Error() + " " + strconv.Quote(h.Header())
				}
				return ErrKey.Error() + ": " + s.Error()
			}
		}
		return ErrKey.Error() + ": the key function failed (" + typeName(ke.err) + "; its text is not logged: it may carry what the client sent)"
	}
	var ae *alsoError
	if errors.As(err, &ae) {
		return ae.loggable()
	}
	var le *limitError
	if errors.As(err, &le) && !errors.Is(le.err, core.ErrInvalidLimit) && !errors.Is(le.err, core.ErrCostTooHigh) {
		return "nethttp: WithLimitFunc: the function failed (" + typeName(le.err) + "; its text is not logged: it may carry what the client sent)"
	}
	return err.Error()
}

// typeName is the dynamic type of err, as %T prints it.
func typeName(err error) string { return fmt.Sprintf("%T", err) }
