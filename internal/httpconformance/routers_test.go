package httpconformance_test

import (
	"io"
	"net/http"
	"strings"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	labecho "github.com/labstack/echo/v4"
	labechov5 "github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	echov5 "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The routes every app serves, as generic patterns ({name} parameters);
// /api/items/{id} sits in a sub-router or group at /api. Any other path
// gets the router's own 404.
const (
	routeUser   = "/users/{id}"
	routeLogin  = "/login"
	routeHealth = "/health"
	routeItem   = "/api/items/{id}"
)

// mw is one middleware of an app: its limiter and options; routes are
// WithRoutes overrides by generic pattern ("[METHOD ]/users/{id}"),
// translated for each router: the same string but for echo's (v4, v5)
// and gin's ":id" parameters.
type mw struct {
	lim    *core.Limiter
	opts   []nethttp.Option
	routes map[string]*core.Limiter
}

// app is what a case serves: a middleware around the whole router (global,
// on the root router before routing) and middlewares on single routes.
type app struct {
	global *mw
	route  map[string]*mw // generic pattern → middleware of that route only
}

// adapter builds an app on one router with one of the five middlewares.
type adapter struct {
	name string
	// pattern translates a generic route pattern to what the router reports.
	pattern func(generic string) string
	build   func(a app, ad adapter) http.Handler
}

// options returns m's options with its routes translated for ad.
func (m *mw) options(ad adapter) []nethttp.Option {
	opts := append([]nethttp.Option(nil), m.opts...)
	if m.routes != nil {
		routes := make(map[string]*core.Limiter, len(m.routes))
		for p, l := range m.routes {
			routes[ad.pattern(p)] = l
		}
		opts = append(opts, nethttp.WithRoutes(routes))
	}
	return opts
}

// body is what every route's handler writes, through the router's own
// writer, so allowed responses match too. The handlers set Content-Type
// themselves: httptest.ResponseRecorder sniffs it only when Write comes
// before WriteHeader, and echo and gin call WriteHeader first (a real
// server sniffs either way).
const body = "ok"

// okResponse is every route's handler, on the writer of any router.
func okResponse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, body)
}

var adapters = []adapter{
	{name: "nethttp", pattern: func(p string) string { return p }, build: buildNetHTTP},
	{name: "chi", pattern: func(p string) string { return p }, build: buildChi},
	{name: "echo", pattern: colonParams, build: buildEcho},
	{name: "echov5", pattern: colonParams, build: buildEchoV5},
	{name: "gin", pattern: colonParams, build: buildGin},
}

// colonParams turns "/users/{id}" into echo's (v4, v5) and gin's "/users/:id".
func colonParams(p string) string {
	return strings.NewReplacer("{", ":", "}", "").Replace(p)
}

func buildNetHTTP(a app, ad adapter) http.Handler {
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { okResponse(w) })
	for _, p := range []string{routeUser, routeLogin, routeHealth, routeItem} {
		var h http.Handler = ok
		if m := a.route[p]; m != nil {
			h = nethttp.Middleware(m.lim, m.options(ad)...)(h)
		}
		mux.Handle("GET "+p, h)
	}
	if a.global == nil {
		return mux
	}
	opts := append(a.global.options(ad), nethttp.WithServeMux(mux))
	return nethttp.Middleware(a.global.lim, opts...)(mux)
}

func buildChi(a app, ad adapter) http.Handler {
	ok := func(w http.ResponseWriter, _ *http.Request) { okResponse(w) }
	r := gochi.NewRouter()
	if a.global != nil {
		r.Use(chi.Middleware(a.global.lim, a.global.options(ad)...))
	}
	on := func(r gochi.Router, p string) gochi.Router {
		if m := a.route[p]; m != nil {
			return r.With(chi.Middleware(m.lim, m.options(ad)...))
		}
		return r
	}
	on(r, routeUser).Get(routeUser, ok)
	on(r, routeLogin).Get(routeLogin, ok)
	on(r, routeHealth).Get(routeHealth, ok)
	r.Route("/api", func(sub gochi.Router) {
		on(sub, routeItem).Get(strings.TrimPrefix(routeItem, "/api"), ok)
	})
	return r
}

func buildEcho(a app, ad adapter) http.Handler {
	ok := func(c labecho.Context) error { okResponse(c.Response()); return nil }
	e := labecho.New()
	if a.global != nil {
		e.Use(echo.Middleware(a.global.lim, a.global.options(ad)...))
	}
	on := func(p string) []labecho.MiddlewareFunc {
		if m := a.route[p]; m != nil {
			return []labecho.MiddlewareFunc{echo.Middleware(m.lim, m.options(ad)...)}
		}
		return nil
	}
	e.GET(ad.pattern(routeUser), ok, on(routeUser)...)
	e.GET(ad.pattern(routeLogin), ok, on(routeLogin)...)
	e.GET(ad.pattern(routeHealth), ok, on(routeHealth)...)
	api := e.Group("/api")
	api.GET(strings.TrimPrefix(ad.pattern(routeItem), "/api"), ok, on(routeItem)...)
	return e
}

func buildEchoV5(a app, ad adapter) http.Handler {
	ok := func(c *labechov5.Context) error { okResponse(c.Response()); return nil }
	e := labechov5.New()
	if a.global != nil {
		e.Use(echov5.Middleware(a.global.lim, a.global.options(ad)...))
	}
	on := func(p string) []labechov5.MiddlewareFunc {
		if m := a.route[p]; m != nil {
			return []labechov5.MiddlewareFunc{echov5.Middleware(m.lim, m.options(ad)...)}
		}
		return nil
	}
	e.GET(ad.pattern(routeUser), ok, on(routeUser)...)
	e.GET(ad.pattern(routeLogin), ok, on(routeLogin)...)
	e.GET(ad.pattern(routeHealth), ok, on(routeHealth)...)
	api := e.Group("/api")
	api.GET(strings.TrimPrefix(ad.pattern(routeItem), "/api"), ok, on(routeItem)...)
	return e
}

func buildGin(a app, ad adapter) http.Handler {
	ok := func(c *gingonic.Context) { okResponse(c.Writer) }
	r := gingonic.New()
	if a.global != nil {
		r.Use(gin.Middleware(a.global.lim, a.global.options(ad)...))
	}
	on := func(p string) []gingonic.HandlerFunc {
		if m := a.route[p]; m != nil {
			return []gingonic.HandlerFunc{gin.Middleware(m.lim, m.options(ad)...), ok}
		}
		return []gingonic.HandlerFunc{ok}
	}
	r.GET(ad.pattern(routeUser), on(routeUser)...)
	r.GET(ad.pattern(routeLogin), on(routeLogin)...)
	r.GET(ad.pattern(routeHealth), on(routeHealth)...)
	api := r.Group("/api")
	api.GET(strings.TrimPrefix(ad.pattern(routeItem), "/api"), on(routeItem)...)
	return r
}
