package nethttp

import (
	"context"
	"net/http"

	"github.com/sluicehq/ratelimit/core"
)

// WithCountIf makes a request count only when counts(r, status) says so,
// status being the code the handler answered with: for instance only the
// failed attempts at a login,
//
//	WithCountIf(func(r *http.Request, status int) bool { return status >= 400 })
//
// The cost is taken before the handler, as always, so a flood of
// concurrent requests can never pass the limit together; it is given back
// (core.Limiter.Refund, one round trip) after a response that does not
// count. A refunded response carries the header fields of the decision
// made before the handler; the next response shows the refund. Nothing is
// given back for a denied, degraded or dry-run decision (nothing was
// taken). A refund the store cannot make is reported like a degraded
// decision (Config.OnError, the log), never to the client. Default: every
// allowed request counts.
func WithCountIf(counts func(r *http.Request, status int) bool) Option {
	mustNotBeNil(counts == nil, "WithCountIf")
	return func(c *config) { c.countIf = counts }
}

// Charge is what a Gate took for one request that WithCountIf may give
// back; the zero Charge, which Begin returns without WithCountIf, took
// nothing and has nothing to settle.
type Charge struct {
	lim *core.Limiter
	key string
	n   int
}

// Settle gives back what c took when WithCountIf says a response with
// status does not count. Adapters call it after the handler.
func (g *Gate) Settle(r *http.Request, c Charge, status int) {
	if c.lim == nil || g.countIf(r, status) {
		return
	}
	_, _ = c.lim.Refund(context.WithoutCancel(r.Context()), c.key, c.n)
}

// Serve runs next for a request Begin allowed with c, capturing the
// status when WithCountIf needs it, then settles c.
func (g *Gate) Serve(next http.Handler, w http.ResponseWriter, r *http.Request, c Charge) {
	if c.lim == nil {
		next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	g.Settle(r, c, sw.status())
}

// statusWriter records the status a handler answered with. Unwrap lets
// http.ResponseController reach the writer's other abilities (Flush,
// Hijack, deadlines).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
