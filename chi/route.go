package chi

import (
	"net/http"
	pathpkg "path"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// RoutePattern returns the pattern of the chi route r is served by, as
// chi.RouteContext(r.Context()).RoutePattern() reports it in the route's
// handler ("/users/{id}"), wherever the middleware runs; "" when no route
// matches or r is not served by chi.
//
// chi runs the middlewares given to a router's Use before that router
// routes, when the pattern is not yet known (chi documents reading it
// after calling the next handler, too late for a rate limiter). Once chi
// has routed r to its handler (r.With, r.Group, or a route's own
// middleware) RoutePattern reads the pattern chi set in r.Pattern; before
// that it asks the root router where r would go (chi.Routes.Find), one
// more route match. A path rewritten in the routing context by a
// middleware of the root router (middleware.StripSlashes, CleanPath) is
// looked up as rewritten when it runs before RoutePattern is called;
// Middleware also follows those that run after it.
func RoutePattern(r *http.Request) string { return routePattern(r, nil, 0) }

// rewrites are chi's path-rewriting middlewares found in a router.
type rewrites uint32

const (
	stripSlash rewrites = 1 << iota // middleware.StripSlashes or RedirectSlashes: one trailing "/" goes
	cleanPath                       // middleware.CleanPath: path.Clean
)

// rewriters are the middlewares Middleware follows, by code address (a
// func value cannot be compared otherwise).
var rewriters = map[uintptr]rewrites{
	reflect.ValueOf(middleware.StripSlashes).Pointer():    stripSlash,
	reflect.ValueOf(middleware.RedirectSlashes).Pointer(): stripSlash,
	reflect.ValueOf(middleware.CleanPath).Pointer():       cleanPath,
}

// routePattern is RoutePattern, for a router wrapped from outside too
// (outer, when r has no routing context yet), with the path rewritten as
// rw's middlewares would before the router routes it. Applying a rewrite
// that in fact runs elsewhere (before this middleware, or in another
// sub-router) changes only the route of a request that path would not
// have matched anyway.
// routesKnown reports whether the routes serving r are known to
// routePattern: chi's routing context or a router wrapped from outside.
func routesKnown(r *http.Request, outer chi.Routes) bool {
	rctx := chi.RouteContext(r.Context())
	return outer != nil || rctx != nil && rctx.Routes != nil
}

func routePattern(r *http.Request, outer chi.Routes, rw rewrites) string {
	routes, rctx := outer, chi.RouteContext(r.Context())
	if rctx != nil && rctx.Routes != nil {
		routes = rctx.Routes
		// chi sets r.Pattern just before calling a matched handler; a
		// pattern ending in "*" may be a sub-router's mount point, not yet
		// the route.
		if p := r.Pattern; p != "" && len(rctx.RoutePatterns) > 0 && !strings.HasSuffix(p, "*") {
			return p
		}
	}
	if routes == nil {
		return ""
	}
	path := ""
	if rctx != nil && len(rctx.RoutePatterns) == 0 {
		path = rctx.RoutePath // a root middleware's rewrite, as chi routes it
	}
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if rw&cleanPath != 0 && path != "" {
			path = pathpkg.Clean(path)
		}
	}
	if path == "" {
		path = "/"
	}
	if rw&stripSlash != 0 && len(path) > 1 && path[len(path)-1] == '/' {
		path = path[:len(path)-1]
	}
	method := r.Method
	if rctx != nil && rctx.RouteMethod != "" {
		method = rctx.RouteMethod
	}
	tmp := findContexts.Get().(*chi.Context)
	tmp.Reset()
	p := routes.Find(tmp, method, path)
	findContexts.Put(tmp)
	return trimPattern(p)
}

// trimPattern joins sub-router patterns as RoutePattern does: Find and
// Walk give "/api/" where the handler sees "/api".
func trimPattern(p string) string {
	if p != "/" {
		p = strings.TrimSuffix(p, "//")
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// findContexts holds routing contexts for Find, which fills one in;
// pooled, as chi pools its own, so a lookup does not allocate.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// walkRoutes lists the routes of the router serving r (or outer), for
// nethttp.Chain.Routes, and records in found the path rewriters any
// route's middlewares hold.
func walkRoutes(r *http.Request, outer chi.Routes, found *atomic.Uint32) ([]string, string, bool) {
	routes := outer
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		routes = rctx.Routes
	}
	if routes == nil {
		return nil, "the middleware runs outside any chi router (the request has no chi routing context): " +
			"give it to the router's Use, With or Group", true
	}
	list, rw := chiRoutes(routes)
	found.Store(uint32(rw))
	return list, "", true
}

// chiRoutes lists routes' routes (chi.Walk), "METHOD pattern" each, and
// the path rewriters any route's middlewares hold.
func chiRoutes(routes chi.Routes) ([]string, rewrites) {
	list := []string{}
	var rw rewrites
	_ = chi.Walk(routes, func(method, route string, _ http.Handler, mws ...func(http.Handler) http.Handler) error {
		list = append(list, method+" "+trimPattern(route))
		for _, mw := range mws {
			rw |= rewriters[reflect.ValueOf(mw).Pointer()]
		}
		return nil
	})
	return list, rw
}
