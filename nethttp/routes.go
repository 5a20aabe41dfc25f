package nethttp

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/ratelimit/core"
)

// A WithRoutes pattern is "[METHOD ]path", the path in the router's own
// syntax: "POST /login", "/users/{id}" (net/http, chi), "GET /users/:id"
// (echo, gin). Without a method it applies to every method of the route.

// routeLimit is one WithRoutes entry.
type routeLimit struct {
	method  string // "" for every method
	lim     *core.Limiter
	pattern string // as written, for messages
}

// routeTable holds the WithRoutes entries by path; read-only once built.
type routeTable map[string][]routeLimit

func newRouteTable(routes map[string]*core.Limiter) routeTable {
	if len(routes) == 0 {
		return nil
	}
	t := make(routeTable, len(routes))
	for _, p := range slices.Sorted(maps.Keys(routes)) {
		method, path, _ := splitPattern(p) // checked by WithRoutes
		t[path] = append(t[path], routeLimit{method: method, lim: routes[p], pattern: p})
	}
	return t
}

// lookup returns the limiter of a request with method served by the route
// whose pattern the router reported (a net/http pattern may start with a
// method, which the request's own replaces), or nil. An entry for the
// method wins over one for every method; a HEAD request, which net/http
// serves with a GET route, takes a GET entry. It allocates nothing.
func (t routeTable) lookup(method, route string) *core.Limiter {
	var get, all *core.Limiter
	for _, e := range t[routePath(route)] {
		switch e.method {
		case method:
			return e.lim
		case "":
			all = e.lim
		case http.MethodGet:
			if method == http.MethodHead {
				get = e.lim
			}
		}
	}
	if get != nil {
		return get
	}
	return all
}

// patterns returns every pattern as written, sorted.
func (t routeTable) patterns() []string {
	var ps []string
	for _, es := range t {
		for _, e := range es {
			ps = append(ps, e.pattern)
		}
	}
	slices.Sort(ps)
	return ps
}

// unmatched returns the patterns for which has reports no route, sorted.
func (t routeTable) unmatched(has func(method, path string) bool) []string {
	var ps []string
	for path, es := range t {
		for _, e := range es {
			if !has(e.method, path) {
				ps = append(ps, e.pattern)
			}
		}
	}
	slices.Sort(ps)
	return ps
}

var (
	errNoPath   = errors.New("no path after the method")
	errLower    = errors.New("the method must be upper case, as the router matches it")
	errNoMethod = errors.New("not a method")
	errSpaces   = errors.New("more than a method and a path")
	errSlash    = errors.New("the path must start with /")
)

// splitPattern parses "[METHOD ]path", whatever the router.
func splitPattern(p string) (method, path string, err error) {
	path = p
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		method, path = p[:i], strings.TrimLeft(p[i:], " \t")
		if method == "" {
			return "", "", errNoMethod
		}
		for _, c := range []byte(method) {
			switch {
			case 'a' <= c && c <= 'z':
				return "", "", errLower
			case !isTokenChar(c):
				return "", "", errNoMethod
			}
		}
		if path == "" {
			return "", "", errNoPath
		}
	}
	if strings.ContainsAny(path, " \t") {
		return "", "", errSpaces
	}
	if !strings.Contains(path, "/") {
		return "", "", errSlash
	}
	return method, path, nil
}

// isTokenChar reports whether c may appear in an HTTP method (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// checkSyntax reports why path is not written in the syntax of router,
// whose path parameters are ":id" when colon, else "{id}". Only net/http
// patterns may start with a host.
func checkSyntax(router, path string, colon bool) error {
	if host, _, _ := strings.Cut(path, "/"); host != "" {
		if router != netHTTP || slices.Contains(methods, host) || host == http.MethodHead {
			return errSlash // "POST/login": not a host but a method without its space
		}
	}
	for seg := range strings.SplitSeq(path, "/") {
		switch {
		case colon && strings.ContainsAny(seg, "{}"):
			return errors.New(router + ` writes a path parameter ":id", not "{id}"`)
		case !colon && strings.HasPrefix(seg, ":"):
			return errors.New(router + ` writes a path parameter "{id}", not ":id"`)
		}
	}
	return nil
}

// Router names the router an adapter serves and how it writes path
// parameters: its Gate (Router.NewGate) checks WithRoutes patterns
// against that syntax, and names the router in log lines and errors.
type Router struct {
	Name        string // "chi", "echo", "gin"
	ColonParams bool   // path parameters are ":id" (echo, gin), else "{id}" (net/http, chi)
}

// netHTTPRouter is net/http's ServeMux, whose patterns may start with a host.
var netHTTPRouter = Router{Name: netHTTP}

// netHTTP names net/http's ServeMux in messages.
const netHTTP = "net/http"

// checkSyntax returns an error naming the first pattern among routes that
// is not written in rt's syntax.
func (rt Router) checkSyntax(routes map[string]*core.Limiter) error {
	for _, p := range slices.Sorted(maps.Keys(routes)) {
		_, path, _ := splitPattern(p) // checked by WithRoutes
		if err := checkSyntax(rt.Name, path, rt.ColonParams); err != nil {
			return fmt.Errorf("nethttp: WithRoutes: pattern %q: %w", p, err)
		}
	}
	return nil
}

// CheckRoutes returns an error (matching ErrRoute) naming every WithRoutes
// pattern among opts that is not written in rt's syntax or matches none
// of routes, the router's routes, each "METHOD path" ("path" alone for
// every method) as the router reports route patterns; nil when every
// pattern applies. Each adapter's CheckRoutes lists its router's routes
// and calls it, for a check at startup or in a test, after the routes are
// registered.
func (rt Router) CheckRoutes(routes []string, opts ...Option) error {
	c := newConfig(opts)
	if err := rt.checkSyntax(c.routes); err != nil {
		return fmt.Errorf("%w: %w", ErrRoute, err)
	}
	return routeError(rt, newRouteTable(c.routes).unmatched(listed(routes)))
}

// CheckRoutes returns an error (matching ErrRoute) naming every WithRoutes
// pattern among opts that matches no route of mux (or of a ServeMux mux
// hands requests to as they are), or is not written as a ServeMux pattern;
// nil when every pattern applies. Call it at startup or in a test, once
// the routes are registered: the middleware itself can tell only at the
// first request, in a log line.
func CheckRoutes(mux *http.ServeMux, opts ...Option) error {
	c := newConfig(opts)
	if err := netHTTPRouter.checkSyntax(c.routes); err != nil {
		return fmt.Errorf("%w: %w", ErrRoute, err)
	}
	return routeError(netHTTPRouter, newRouteTable(c.routes).unmatched(func(method, path string) bool {
		return muxHas(mux, method, path)
	}))
}

// routeError is the error for unmatched patterns of rt; nil for none.
func routeError(rt Router, unmatched []string) error {
	if len(unmatched) == 0 {
		return nil
	}
	q := make([]string, len(unmatched))
	for i, p := range unmatched {
		q[i] = strconv.Quote(p)
	}
	return fmt.Errorf("%w: WithRoutes patterns that match no %s route: %s", ErrRoute, rt.Name, strings.Join(q, ", "))
}

// listed reports, for routeTable.unmatched, whether routes (as
// Chain.Routes lists them) has a route for method and path.
func listed(routes []string) func(method, path string) bool {
	type route struct{ method, path string }
	rs := make([]route, 0, len(routes))
	for _, r := range routes {
		m, p, err := splitPattern(r)
		if err != nil {
			m, p = "", r
		}
		rs = append(rs, route{m, p})
	}
	return func(method, path string) bool {
		for _, r := range rs {
			if r.path == path && (method == "" || r.method == "" || r.method == method ||
				method == http.MethodHead && r.method == http.MethodGet) {
				return true
			}
		}
		return false
	}
}

// unmatchedIn is a check for checkRoutes from an adapter's route list.
func (g *Gate) unmatchedIn(list func() ([]string, string, bool)) ([]string, string, bool) {
	routes, misplaced, ok := list()
	if !ok || misplaced != "" || routes == nil {
		return nil, misplaced, ok
	}
	return g.table.unmatched(listed(routes)), "", true
}

// checkRoutes runs check until it reports ok, and logs its finding once.
// check returns the unmatched patterns, or why no pattern can apply.
func (g *Gate) checkRoutes(check func() (unmatched []string, misplaced string, ok bool)) {
	if g.table == nil || g.routesChecked.Load() {
		return
	}
	g.routesMu.Lock()
	defer g.routesMu.Unlock()
	if g.routesChecked.Load() {
		return
	}
	unmatched, misplaced, ok := check()
	if !ok {
		return
	}
	g.routesChecked.Store(true)
	switch {
	case misplaced != "":
		g.logger.Error("ratelimit: WithRoutes limits never apply here: "+misplaced,
			"router", g.router.Name, "patterns", g.table.patterns())
	case len(unmatched) > 0:
		g.logger.Error("ratelimit: WithRoutes patterns match no route; their limits never apply",
			"router", g.router.Name, "patterns", unmatched)
	}
}

// checkMux is Middleware's route check, at the first request: against
// mux when known; else the middleware must run where net/http has routed
// r (wrapped around each handler), whose mux is unknown.
func (g *Gate) checkMux(mux *http.ServeMux, r *http.Request) {
	g.checkRoutes(func() ([]string, string, bool) {
		switch {
		case mux != nil:
			return g.table.unmatched(func(method, path string) bool { return muxHas(mux, method, path) }), "", true
		case r.Pattern == "":
			return nil, "the middleware runs before a ServeMux routes the request (Request.Pattern is empty): " +
				"wrap the ServeMux itself, pass it to WithServeMux, or wrap each handler", true
		}
		return nil, "", true
	})
}

// muxPattern is the pattern mux routes r to, following a ServeMux that
// mux hands the request to as it is (one mounted with its full paths);
// "" when no route matches.
func muxPattern(mux *http.ServeMux, r *http.Request) string {
	h, p := mux.Handler(r)
	for range 8 { // nesting deeper than this is not followed
		inner, ok := h.(*http.ServeMux)
		if !ok || inner == mux {
			break
		}
		mux = inner
		if h, p = mux.Handler(r); p == "" {
			break
		}
	}
	return p
}

// methods are those tried for a pattern without a method.
var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// muxHas reports whether mux (or a ServeMux it hands requests to) has a
// route whose pattern's path is path, for method or, when method is "",
// for any common method. It routes a made-up request whose path fills
// every wildcard.
func muxHas(mux *http.ServeMux, method, path string) bool {
	host, p := "", path
	if i := strings.IndexByte(path, '/'); i > 0 {
		host, p = path[:i], path[i:]
	}
	var b strings.Builder
	for i, seg := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		switch {
		case seg == "{$}":
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			b.WriteString("x")
		default:
			b.WriteString(seg)
		}
	}
	try := []string{method}
	if method == "" {
		try = methods
	}
	for _, m := range try {
		r := &http.Request{Method: m, Host: host, URL: &url.URL{Path: b.String()}, Header: http.Header{}}
		if routePath(muxPattern(mux, r)) == path {
			return true
		}
	}
	return false
}

// routePath is a route pattern without the method a net/http pattern may
// start with.
func routePath(route string) string {
	if i := strings.IndexAny(route, " \t"); i > 0 && !strings.HasPrefix(route, "/") {
		return strings.TrimLeft(route[i:], " \t")
	}
	return route
}
