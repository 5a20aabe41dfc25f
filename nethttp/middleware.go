package nethttp

import (
	"net/http"

	"github.com/sluicehq/ratelimit/core"
)

// Middleware returns net/http middleware limiting requests with l: each
// request's key (WithKey, default the client IP) spends its cost (WithCost,
// default 1 token) from its bucket; allowed requests get the rate-limit
// header fields and go on to the next handler, refused ones get 429 Too
// Many Requests (503 when the store is down and l is core.FailClosed) with
// Retry-After and a problem document. It is NewGate(l, opts...) around
// each handler it wraps; see Gate.Serve for what is written when.
//
// Wrapped around a whole http.ServeMux, the middleware runs before routing
// and asks the mux where the request goes, for per-route limits
// (WithRoutes); wrapped around each handler (mux.Handle("POST /login",
// mw(h))), it reads Request.Pattern. See WithRoutes and WithServeMux.
//
// A CORS preflight goes through uncounted only when the middleware knows
// the mux (it wraps it, or WithServeMux) and no route of the mux serves
// OPTIONS at the preflight's path; otherwise it is decided like any
// request (see the guide, "Browsers").
//
// Middleware panics if l is nil, an option is nil, or a WithRoutes pattern
// is not written as net/http's ServeMux writes patterns.
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	g := NewGate(l, opts...)
	return func(next http.Handler) http.Handler {
		mux := g.mux
		if m, ok := next.(*http.ServeMux); ok && mux == nil {
			mux = m
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.checkMux(mux, r)
			ch := Chain{
				Route: func() string { return route(mux, r) },
				Next: func(w http.ResponseWriter) int {
					next.ServeHTTP(w, r)
					return http.StatusOK
				},
			}
			if mux != nil {
				ch.NoOptionsRoute = func() bool { return muxPattern(mux, r) == "" }
			}
			g.Serve(w, r, ch)
		})
	}
}

// route is the pattern of r's route: the one mux routes it to, when the
// middleware knows the mux, else the one that routed it (Request.Pattern,
// set when the middleware wraps a single handler).
func route(mux *http.ServeMux, r *http.Request) string {
	if mux != nil {
		return muxPattern(mux, r)
	}
	return r.Pattern
}
