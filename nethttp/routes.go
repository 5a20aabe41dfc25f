package nethttp

import (
	"errors"
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

// netHTTP names net/http's ServeMux in messages.
const netHTTP = "net/http"

// ForRouter is for adapters, called once, right after NewGate: it names the
// router in log lines and checks that every WithRoutes pattern is written
// in its syntax, path parameters ":id" when colonParams (echo, gin), else
// "{id}" (chi), and the path starting with "/". It panics on the first
// pattern that is not: a pattern that can never match is a programmer
// error, found at startup rather than in production. It returns g.
func (g *Gate) ForRouter(name string, colonParams bool) *Gate {
	g.router = name
	for _, p := range g.table.patterns() {
		_, path, _ := splitPattern(p)
		if err := checkSyntax(name, path, colonParams); err != nil {
			panic("nethttp: WithRoutes: pattern " + strconv.Quote(p) + ": " + err.Error())
		}
	}
	return g
}

// HasRoutes reports whether WithRoutes gave g any route override. An
// adapter whose router knows the route pattern only at a cost (chi, in a
// middleware that runs before routing, has to match the route once more)
// asks it once, at construction, and passes "" to DecideRoute when false.
func (g *Gate) HasRoutes() bool { return g.table != nil }

// CheckRoutes is for adapters: it makes sure no WithRoutes pattern is
// silently never applied. An adapter calls it before each DecideRoute of a
// Gate with routes (HasRoutes); g calls list until list reports ok, then
// never again, so the cost is one atomic load per request.
//
// list returns the router's routes, each "METHOD path" ("path" alone for
// every method) in the syntax the router reports route patterns in; or,
// in misplaced, why the middleware cannot know the route of a request
// where it runs ("it runs in e.Pre, before routing: give it to e.Use"); or
// ok false when it cannot tell yet (a 404 told nothing), so that it is
// asked again at the next request. routes nil with misplaced "" means the
// router's routes cannot be listed: nothing is checked.
//
// g then logs, once, at error level, the patterns that match no route, or
// misplaced: one line, never a silent default limit.
func (g *Gate) CheckRoutes(list func() (routes []string, misplaced string, ok bool)) {
	g.checkRoutes(func() ([]string, string, bool) {
		routes, misplaced, ok := list()
		if !ok || misplaced != "" || routes == nil {
			return nil, misplaced, ok
		}
		type route struct{ method, path string }
		var rs []route
		for _, r := range routes {
			m, p, err := splitPattern(r)
			if err != nil {
				m, p = "", r
			}
			rs = append(rs, route{m, p})
		}
		return g.table.unmatched(func(method, path string) bool {
			for _, r := range rs {
				if r.path == path && (method == "" || r.method == "" || r.method == method ||
					method == http.MethodHead && r.method == http.MethodGet) {
					return true
				}
			}
			return false
		}), "", true
	})
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
			"router", g.routerName(), "patterns", g.table.patterns())
	case len(unmatched) > 0:
		g.logger.Error("ratelimit: WithRoutes patterns match no route; their limits never apply",
			"router", g.routerName(), "patterns", unmatched)
	}
}

func (g *Gate) routerName() string {
	if g.router == "" {
		return netHTTP
	}
	return g.router
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
