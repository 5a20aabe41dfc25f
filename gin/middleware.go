package gin

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// router is gin, for nethttp's Gate: path parameters ":id".
var router = nethttp.Router{Name: "gin", ColonParams: true}

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
// none; CheckRoutes checks them at startup or in a test.
//
// With WithCountIf, a handler that leaves an error (c.Error) and writes
// nothing is settled by the status an outer middleware writes for it; if
// none does, the request counts.
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as gin writes routes ("/users/:id", not "/users/{id}").
func Middleware(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	return middleware(l, nil, opts)
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
	return middleware(l, k, opts)
}

func middleware(l *core.Limiter, k KeyFunc, opts []Option) gin.HandlerFunc {
	g := router.NewGate(l, opts...)
	return func(c *gin.Context) {
		ch := nethttp.Chain{
			Route:  c.FullPath,
			Routes: func() ([]string, string, bool) { return routes(c) },
			// gin runs its middlewares after routing; a request no route
			// serves (404, 405) has no FullPath.
			NoOptionsRoute: func() bool { return c.FullPath() == "" },
			Next:           func(w http.ResponseWriter) int { return serve(c, w) },
		}
		if k != nil {
			ch.Key = func() (string, error) { return k(c) }
		}
		if !g.Serve(c.Writer, c.Request, ch) {
			c.Abort()
		}
	}
}

// serve runs the rest of the chain, through w when it is not c.Writer
// (nethttp.WithCountIf needs the status), and returns its status: 0 while
// an error left with c.Error awaits the response an outer middleware
// writes.
func serve(c *gin.Context, w http.ResponseWriter) int {
	if w != http.ResponseWriter(c.Writer) {
		c.Writer = &countedWriter{ResponseWriter: c.Writer, counted: w}
	}
	c.Next()
	if !c.Writer.Written() && len(c.Errors) > 0 {
		return 0
	}
	return c.Writer.Status()
}

// countedWriter is gin's writer reporting the moments its response is
// committed (the status sent, the connection hijacked) to counted,
// nethttp's writer around the same gin writer. It stays c.Writer after
// the middleware returns, so that a response an outer middleware writes
// is seen too. gin's WriteHeader only records the status; the commit is
// the first write.
type countedWriter struct {
	gin.ResponseWriter
	counted http.ResponseWriter
}

// commit tells counted the status gin is about to send.
func (w *countedWriter) commit() {
	if !w.ResponseWriter.Written() {
		w.counted.WriteHeader(w.ResponseWriter.Status())
	}
}

func (w *countedWriter) WriteHeaderNow() {
	w.commit()
	w.ResponseWriter.WriteHeaderNow()
}

func (w *countedWriter) Write(b []byte) (int, error) {
	w.commit()
	return w.ResponseWriter.Write(b)
}

func (w *countedWriter) WriteString(s string) (int, error) {
	w.commit()
	return w.ResponseWriter.WriteString(s)
}

func (w *countedWriter) Flush() {
	w.commit()
	w.ResponseWriter.Flush()
}

func (w *countedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.counted).Hijack()
}

func (w *countedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CheckRoutes returns an error (matching nethttp.ErrRoute) naming every
// WithRoutes pattern among opts that matches no route of e, or is not
// written as gin writes routes; nil when every pattern applies. Call it
// once the routes are registered, at startup or in a test, with the
// options given to Middleware.
func CheckRoutes(e *gin.Engine, opts ...Option) error {
	return router.CheckRoutes(engineRoutes(e), opts...)
}
