package nethttp

import (
	"bufio"
	"context"
	"net"
	"net/http"

	"github.com/sluicehq/ratelimit/core"
)

// WithCountIf makes a request count only when counts(r, status) says so,
// status being the final status of its response: for instance only the
// failed attempts at a login,
//
//	WithCountIf(func(r *http.Request, status int) bool { return status >= 400 })
//
// The cost is taken before the handler, as always, so a flood of
// concurrent requests can never pass the limit together; it is given back
// (core.Limiter.Refund, one round trip) after a response that does not
// count. The status is the first final one written (1xx informational
// responses such as 103 Early Hints are not final; a handler that writes
// nothing answers 200), also when it is written after the handler
// returned, by an error handler of the router's (echo's HTTPErrorHandler
// for a returned error, a gin middleware answering for c.Error); a
// request whose response is never seen counts: one whose connection was
// hijacked (its response is not HTTP the middleware can read), one whose
// errors nobody answered. A refunded response carries the header fields of
// the decision made before the handler; the next response shows the
// refund. Nothing is given back for a denied, degraded or dry-run decision
// (nothing was taken). A refund the store cannot make is reported like a
// degraded decision (Result.Degraded, the log), never to the client.
// Default: every allowed request counts.
func WithCountIf(counts func(r *http.Request, status int) bool) Option {
	mustNotBeNil(counts == nil, "WithCountIf")
	return func(c *config) { c.countIf = counts }
}

// charge is what a Gate took for one request that WithCountIf may give
// back; the zero charge took nothing and has nothing to settle.
type charge struct {
	lim  *core.Limiter // under WithLimitFunc's limit, when it gave one
	key  string
	n    int
	also []core.Check // WithAlso's
}

// serve runs next for a request decided with c: when c took something,
// next writes through a countingWriter that settles c at the response's
// final status.
func (g *Gate) serve(w http.ResponseWriter, r *http.Request, c charge, next func(http.ResponseWriter) int) {
	if c.lim == nil {
		next(w)
		return
	}
	cw := &countingWriter{ResponseWriter: w, g: g, r: r, c: c}
	status := next(cw)
	switch {
	case cw.hijacked:
	case cw.status != 0:
		cw.settle(cw.status)
	case status != 0:
		cw.settle(status)
	default:
		cw.pending = true // written later, through cw, or never: then it counts
	}
}

// countingWriter records the final status of a response and whether its
// connection was hijacked, for WithCountIf. It implements Flush and
// Hijack itself, so that a handler asserting http.Flusher or http.Hijacker
// (or using http.ResponseController) is seen; Unwrap lets
// http.ResponseController reach the writer's other abilities (deadlines).
type countingWriter struct {
	http.ResponseWriter
	g        *Gate
	r        *http.Request
	c        charge
	status   int  // the first final status written; 0 before
	hijacked bool // counts: the response is not seen
	pending  bool // settle at the first final status written
	settled  bool
}

func (w *countingWriter) WriteHeader(code int) {
	w.final(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.final(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *countingWriter) Flush() {
	w.final(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.hijacked = true
	}
	return conn, rw, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// final records code, unless a status was already recorded or code is an
// informational 1xx (101 Switching Protocols is final), and settles a
// pending charge.
func (w *countingWriter) final(code int) {
	if w.status != 0 || w.hijacked || code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	w.status = code
	if w.pending {
		w.settle(code)
	}
}

// settle gives back what w.c took when the response with status does not
// count; at most once.
func (w *countingWriter) settle(status int) {
	if w.settled {
		return
	}
	w.settled = true
	if w.g.countIf(w.r, status) {
		return
	}
	ctx := context.WithoutCancel(w.r.Context())
	_, _ = w.c.lim.Refund(ctx, w.c.key, w.c.n)
	for _, a := range w.c.also {
		_, _ = a.Limiter.Refund(ctx, a.Key, a.N)
	}
}
