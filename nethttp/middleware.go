package nethttp

import (
	"net/http"

	"github.com/sluicehq/ratelimit/core"
)

// Middleware returns net/http middleware limiting requests with l: each
// request's key (WithKey, default the client IP) spends its cost (WithCost,
// default 1 token) from its bucket; allowed requests get the rate-limit header fields and go on to
// the next handler, refused ones get 429 Too Many Requests (503 when the
// store is down and l is core.FailClosed) with Retry-After and a problem
// document. It is NewGate(l, opts...) around each handler it wraps; see
// Gate.Decide for what is written when.
//
// Wrapped around a whole http.ServeMux, the middleware runs before routing:
// per-route limits (WithRoutes) need WithServeMux, or the middleware
// wrapped around each handler (mux.Handle("GET /users/{id}", mw(h))),
// where Request.Pattern is set.
//
// Middleware panics if l is nil or an option is nil.
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	g := NewGate(l, opts...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if g.Decide(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}
