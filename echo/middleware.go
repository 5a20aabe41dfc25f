package echo

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// router is echo, for nethttp's Gate: path parameters ":id".
var router = nethttp.Router{Name: "echo", ColonParams: true}

// Middleware returns echo middleware limiting requests with l, for e.Use,
// a group or a route. It is nethttp.Middleware with the route pattern
// taken from c.Path() (see WithRoutes), so the status codes, header fields
// and bodies are those of package nethttp.
//
// A refused request (429, 503, or 400 for a key error) is answered here,
// byte for byte as nethttp answers it, and the middleware returns nil
// without calling the next handler: an *echo.HTTPError would let
// e.HTTPErrorHandler replace the problem document and the header fields
// with its own JSON. Middlewares around it, such as echo's request logger,
// still see the status in c.Response().Status.
//
// Give it to e.Use, not e.Pre: middlewares given to Pre run before
// routing, when c.Path() is still empty and WithRoutes cannot match; the
// first routable request then logs so, once. Otherwise the first request
// checks every WithRoutes pattern against e.Routes() and logs, once, those
// that match no route; CheckRoutes checks them at startup or in a test.
//
// With WithCountIf, the status of a handler's returned error is the one
// echo's default HTTPErrorHandler writes: an *echo.HTTPError's code, else
// 500.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as echo writes routes ("/users/:id", not "/users/{id}").
func Middleware(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	return middleware(l, nil, opts)
}

// MiddlewareWithKey is Middleware keyed by k, which reads echo's context
// (a user that an authentication middleware stored with c.Set, for
// instance) instead of the request alone. k replaces WithKey, and runs
// only for requests WithSkip does not exempt. Like a
// keyfuncs.KeyFunc's, its error or an empty key goes to the ErrorHandler
// (400 by default). Do not key by c.RealIP(): unless e.IPExtractor is set,
// it believes X-Forwarded-For and X-Real-IP from any client, so a client
// chooses its own key; key by address with Middleware (keyfuncs.IP).
//
// MiddlewareWithKey panics if l or k is nil, or an option is nil.
func MiddlewareWithKey(l *core.Limiter, k KeyFunc, opts ...Option) echo.MiddlewareFunc {
	if k == nil {
		panic("echo: nil KeyFunc")
	}
	return middleware(l, k, opts)
}

func middleware(l *core.Limiter, k KeyFunc, opts []Option) echo.MiddlewareFunc {
	g := router.NewGate(l, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var err error
			ch := nethttp.Chain{
				Route:          c.Path,
				Routes:         func() ([]string, string, bool) { return routes(c) },
				NoOptionsRoute: func() bool { return noOptionsRoute(c) },
				Next:           func(w http.ResponseWriter) int { return serve(next, c, w, &err) },
			}
			if k != nil {
				ch.Key = func() (string, error) { return k(c) }
			}
			g.Serve(c.Response(), c.Request(), ch)
			return err
		}
	}
}

// serve runs next, and returns the status of its response for
// nethttp.WithCountIf when w is not c's own response (then the status
// counts): echo writes a returned error's response after the middlewares.
func serve(next echo.HandlerFunc, c echo.Context, w http.ResponseWriter, err *error) int {
	resp := c.Response()
	if w == http.ResponseWriter(resp) {
		*err = next(c)
		return http.StatusOK
	}
	hj := &hijackWatch{ResponseWriter: resp.Writer}
	resp.Writer = hj
	*err = next(c)
	switch {
	case hj.hijacked:
		return 0 // never seen: it counts
	case *err == nil || resp.Committed:
		return resp.Status
	}
	var he *echo.HTTPError
	if errors.As(*err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

// hijackWatch sits under echo's Response and notes a hijacked connection,
// whose response WithCountIf cannot see.
type hijackWatch struct {
	http.ResponseWriter
	hijacked bool
}

func (w *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	w.hijacked = w.hijacked || err == nil
	return conn, rw, err
}

func (w *hijackWatch) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *hijackWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CheckRoutes returns an error (matching nethttp.ErrRoute) naming every
// WithRoutes pattern among opts that matches no route of e (and of its
// host routers), or is not written as echo writes routes; nil when every
// pattern applies. Call it once the routes are registered, at startup or
// in a test, with the options given to Middleware.
func CheckRoutes(e *echo.Echo, opts ...Option) error {
	return router.CheckRoutes(echoRoutes(e), opts...)
}
