package gin

import (
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Middleware returns gin middleware limiting requests with l, for r.Use,
// a group or a route. It is nethttp.Middleware with the route pattern
// taken from c.FullPath() (see WithRoutes), so the status codes, header
// fields and bodies are those of package nethttp.
//
// A refused request (429, 503, or 400 for a key error) is answered here,
// byte for byte as nethttp answers it, then c.Abort() stops the handlers
// after this one; middlewares before it still run their code after
// c.Next(). The response is written directly rather than through
// c.AbortWithStatusJSON or c.Error, which would not give the same bytes.
//
// With WithRoutes, the first request served through an http.Server whose
// Handler is the engine (r.Run, http.Server{Handler: r}) checks every
// pattern against the engine's routes and logs, once, those that match
// none.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as gin writes routes ("/users/:id", not "/users/{id}").
func Middleware(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	g := nethttp.NewGate(l, opts...).ForRouter("gin", true)
	check := g.HasRoutes()
	return func(c *gin.Context) {
		if check {
			g.CheckRoutes(func() ([]string, string, bool) { return routes(c) })
		}
		ok, charge := g.Begin(c.Writer, c.Request, c.FullPath(), nil)
		serve(g, c, ok, charge)
	}
}

// MiddlewareWithKey is Middleware keyed by k, which reads gin's context
// (a user that an authentication middleware stored with c.Set, for
// instance) instead of the request alone. k replaces WithKey, and runs
// only for requests WithSkip does not exempt. Like a
// keyfuncs.KeyFunc's, its error or an empty key goes to the ErrorHandler
// (400 by default). Do not key by c.ClientIP(): unless the engine's trusted
// proxies are set, it believes X-Forwarded-For and X-Real-IP from any
// peer, so a client chooses its own key; key by address with Middleware
// (keyfuncs.IP).
//
// MiddlewareWithKey panics if l or k is nil, or an option is nil.
func MiddlewareWithKey(l *core.Limiter, k KeyFunc, opts ...Option) gin.HandlerFunc {
	if k == nil {
		panic("gin: nil KeyFunc")
	}
	g := nethttp.NewGate(l, opts...).ForRouter("gin", true)
	check := g.HasRoutes()
	return func(c *gin.Context) {
		if check {
			g.CheckRoutes(func() ([]string, string, bool) { return routes(c) })
		}
		ok, charge := g.Begin(c.Writer, c.Request, c.FullPath(), func() (string, error) { return k(c) })
		serve(g, c, ok, charge)
	}
}

// serve aborts a refused request, or, with nethttp.WithCountIf, runs the
// rest of the chain and settles charge with the status it answered with.
func serve(g *nethttp.Gate, c *gin.Context, ok bool, charge nethttp.Charge) {
	if !ok {
		c.Abort()
		return
	}
	if charge != (nethttp.Charge{}) {
		c.Next()
		g.Settle(c.Request, charge, c.Writer.Status())
	}
}
