package chi

import (
	"log/slog"
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Option configures Middleware. It is nethttp.Option: every option of
// package nethttp works here too, and behaves the same.
type Option = nethttp.Option

// HeaderStyle selects the rate-limit header fields; see nethttp.HeaderStyle.
type HeaderStyle = nethttp.HeaderStyle

// The header styles of nethttp.
const (
	HeadersDraft06 = nethttp.HeadersDraft06 // RateLimit-Limit, -Remaining, -Reset, -Policy; the default
	HeadersDraft11 = nethttp.HeadersDraft11 // RateLimit-Policy and RateLimit structured fields
	HeadersLegacy  = nethttp.HeadersLegacy  // X-RateLimit-Limit, -Remaining, -Reset (Unix seconds)
	HeadersNone    = nethttp.HeadersNone    // no rate-limit fields; Retry-After only
)

// DenyHandler writes the response to a refused request; see nethttp.DenyHandler.
type DenyHandler = nethttp.DenyHandler

// ErrorHandler writes the response to a request that could not be rate
// limited; see nethttp.ErrorHandler.
type ErrorHandler = nethttp.ErrorHandler

// ErrKey is what an ErrorHandler receives, wrapped, for a key error;
// it is nethttp.ErrKey.
var ErrKey = nethttp.ErrKey

// ErrRoute is what CheckRoutes returns, wrapped, for a WithRoutes pattern
// that never applies; it is nethttp.ErrRoute.
var ErrRoute = nethttp.ErrRoute

// WithKey sets how a request is turned into the key of its bucket.
// Default keyfuncs.IP(). It is nethttp.WithKey.
func WithKey(k keyfuncs.KeyFunc) Option { return nethttp.WithKey(k) }

// WithCost sets how many tokens a request spends; default 1.
// It is nethttp.WithCost.
func WithCost(f func(*http.Request) int) Option { return nethttp.WithCost(f) }

// WithSkip exempts the requests for which f returns true.
// It is nethttp.WithSkip.
func WithSkip(f func(*http.Request) bool) Option { return nethttp.WithSkip(f) }

// WithDenyHandler replaces the 429 (or 503) response to a refused request.
// It is nethttp.WithDenyHandler.
func WithDenyHandler(h DenyHandler) Option { return nethttp.WithDenyHandler(h) }

// WithErrorHandler replaces the 400 (key error) or 500 (invalid cost)
// response. It is nethttp.WithErrorHandler.
func WithErrorHandler(h ErrorHandler) Option { return nethttp.WithErrorHandler(h) }

// WithObserver calls f once for every request that is not skipped.
// It is nethttp.WithObserver.
func WithObserver(f func(r *http.Request, res core.Result, err error, dryRun bool)) Option {
	return nethttp.WithObserver(f)
}

// WithCountIf makes a request count only when counts(r, status) says so
// (only failed logins, say): its cost is given back after a response that
// does not count. It is nethttp.WithCountIf.
func WithCountIf(counts func(r *http.Request, status int) bool) Option {
	return nethttp.WithCountIf(counts)
}

// WithLogger sets where requests that could not be rate limited are
// reported, at most once per 10 s. It is nethttp.WithLogger.
func WithLogger(l *slog.Logger) Option { return nethttp.WithLogger(l) }

// WithHeaders selects the rate-limit header fields; default HeadersDraft06.
// It is nethttp.WithHeaders.
func WithHeaders(style HeaderStyle) Option { return nethttp.WithHeaders(style) }

// WithDryRun decides and sends the header fields but refuses nothing.
// It is nethttp.WithDryRun.
func WithDryRun() Option { return nethttp.WithDryRun() }

// WithLimiterFunc chooses the limiter per request (plan tiers); nil means
// the default limiter. It is nethttp.WithLimiterFunc.
func WithLimiterFunc(f func(*http.Request) *core.Limiter) Option {
	return nethttp.WithLimiterFunc(f)
}

// WithLimitFunc sets the limit of each request, read per request (a
// tenant's quota): decided under it in the chosen limiter's buckets; an
// error or a bad limit goes to the ErrorHandler (500). It is
// nethttp.WithLimitFunc.
func WithLimitFunc(f func(r *http.Request) (core.Limit, error)) Option {
	return nethttp.WithLimitFunc(f)
}

// WithRoutes overrides the limiter per chi route: "[METHOD ]pattern", such
// as "POST /login", "/users/{id}" (every method) or "/api/items/{id}" for a
// route of a sub-router mounted at "/api": the pattern
// chi.RouteContext(ctx).RoutePattern() reports in the handler. It is
// nethttp.WithRoutes; see there what panics and what is logged.
func WithRoutes(routes map[string]*core.Limiter) Option { return nethttp.WithRoutes(routes) }

// ExposedHeaders returns the header fields of style a CORS configuration
// must expose to JavaScript (Access-Control-Expose-Headers). It is
// nethttp.ExposedHeaders.
func ExposedHeaders(style HeaderStyle) []string { return nethttp.ExposedHeaders(style) }
