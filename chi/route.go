package chi

import (
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
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
// more route match. A path rewritten in the routing context by a middleware
// of the root router (middleware.StripSlashes, CleanPath) is looked up as
// rewritten only when this middleware runs after it on the root router.
func RoutePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return ""
	}
	// chi sets r.Pattern just before calling a matched handler; a pattern
	// ending in "*" may be a sub-router's mount point, not yet the route.
	if p := r.Pattern; p != "" && len(rctx.RoutePatterns) > 0 && !strings.HasSuffix(p, "*") {
		return p
	}
	path := ""
	if len(rctx.RoutePatterns) == 0 {
		path = rctx.RoutePath // a root middleware's rewrite, as chi routes it
	}
	if path == "" {
		path = r.URL.RawPath
	}
	if path == "" {
		path = r.URL.Path
	}
	if path == "" {
		path = "/"
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	tmp := findContexts.Get().(*chi.Context)
	tmp.Reset()
	p := rctx.Routes.Find(tmp, method, path)
	findContexts.Put(tmp)
	// Find joins sub-router patterns differently from RoutePattern
	// ("/api" + "/" is "/api/" there, "/api" here): trim as RoutePattern does.
	if p != "/" {
		p = strings.TrimSuffix(p, "//")
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// findContexts holds routing contexts for Find, which fills one in;
// pooled, as chi pools its own, so a lookup does not allocate.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}
