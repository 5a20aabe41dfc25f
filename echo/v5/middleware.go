package echo

import (
	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Middleware returns echo middleware limiting requests with l, for e.Use,
// a group or a route. It is nethttp.Middleware with the route pattern
// taken from c.Path() (see WithRoutes), so the status codes, header fields
// and bodies are those of package nethttp.
//
// A refused request (429, 503, or 400 for a key error) is answered here,
// byte for byte as nethttp answers it, and the middleware returns nil
// without calling the next handler: an error would let e.HTTPErrorHandler
// replace the problem document and the header fields with its own JSON.
// Middlewares around it, such as echo's request logger, still see the
// status (echo.UnwrapResponse(c.Response())).
//
// Give it to e.Use, not e.Pre: middlewares given to Pre run before
// routing, when c.Path() is still empty and WithRoutes cannot match; the
// first routable request then logs so, once. Otherwise the first request
// checks every WithRoutes pattern against the routes of e.Router() and
// logs, once, those that match no route.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as echo writes routes ("/users/:id", not "/users/{id}").
func Middleware(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	g := nethttp.NewGate(l, opts...).ForRouter("echo", true)
	check := g.HasRoutes()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if check {
				g.CheckRoutes(func() ([]string, string, bool) { return routes(c) })
			}
			ok, charge := g.Begin(c.Response(), c.Request(), c.Path(), nil)
			if !ok {
				return nil
			}
			return serve(g, next, c, charge)
		}
	}
}

// MiddlewareWithKey is Middleware keyed by k, which reads echo's context
// (a user that an authentication middleware stored with c.Set, for
// instance) instead of the request alone. k replaces WithKey, and runs
// only for requests WithSkip does not exempt. Like a
// keyfuncs.KeyFunc's, its error or an empty key goes to the ErrorHandler
// (400 by default). Key by address with Middleware (keyfuncs.IP), not by
// c.RealIP(): that is whatever e.IPExtractor says, and echo's legacy
// extractor believes X-Forwarded-For and X-Real-IP from any client, so a
// client would choose its own key.
//
// MiddlewareWithKey panics if l or k is nil, or an option is nil.
func MiddlewareWithKey(l *core.Limiter, k KeyFunc, opts ...Option) echo.MiddlewareFunc {
	if k == nil {
		panic("echo: nil KeyFunc")
	}
	g := nethttp.NewGate(l, opts...).ForRouter("echo", true)
	check := g.HasRoutes()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if check {
				g.CheckRoutes(func() ([]string, string, bool) { return routes(c) })
			}
			ok, charge := g.Begin(c.Response(), c.Request(), c.Path(), func() (string, error) { return k(c) })
			if !ok {
				return nil
			}
			return serve(g, next, c, charge)
		}
	}
}

// serve runs next and settles charge (nethttp.WithCountIf) with the status
// the handler answered with, or will: echo writes a returned error's
// response after the middlewares.
func serve(g *nethttp.Gate, next echo.HandlerFunc, c *echo.Context, charge nethttp.Charge) error {
	err := next(c)
	if charge != (nethttp.Charge{}) {
		_, status := echo.ResolveResponseStatus(c.Response(), err)
		g.Settle(c.Request(), charge, status)
	}
	return err
}
