package metrics

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Outcome label values of ratelimit_http_requests_total, besides
// OutcomeAllowed and OutcomeDenied.
const (
	OutcomeUnavailable = "unavailable" // the store was down and the limiter fails closed: 503
	OutcomeDryRun      = "dry_run"     // the limiter refused; dry-run mode let the request through
	OutcomeKeyError    = "key_error"   // no rate-limit key (nethttp.ErrKey): 400, or let through in dry-run mode
	OutcomeError       = "error"       // the request could not be decided (an invalid cost or limit): 500
)

// httpMetrics holds one policy's ratelimit_http_requests_total children.
type httpMetrics struct {
	allowed, denied, unavailable, dryRun, keyError, err prometheus.Counter
}

// HTTPObserver returns a function for nethttp.WithObserver (and the chi,
// echo and gin adapters' WithObserver) counting requests in
// ratelimit_http_requests_total: allowed, denied (429: the limit
// refused), unavailable (503: the store was down and the limiter fails
// closed; a dashboard tells the limit working from the limiter down),
// dry_run, key_error and error. The policy label is the binding policy's
// name (core.Result.Name); for key_error and error, the policy of the
// middleware's limiter (the default one for a key error, which comes
// before any limiter is chosen).
//
// One observer serves both modes: in a middleware with nethttp.WithDryRun,
// a request the limiter refused, which dry-run mode lets through, counts
// as dry_run instead of denied or unavailable, and the limiter's own
// ratelimit_decisions_total as would_deny (the middleware decides under
// core.WithDryRun).
func (c *Collector) HTTPObserver() func(r *http.Request, res core.Result, err error, dryRun bool) {
	return func(_ *http.Request, res core.Result, err error, dryRun bool) {
		h := c.httpPolicy(res.Name)
		switch {
		case err != nil && errors.Is(err, nethttp.ErrKey):
			h.keyError.Inc()
		case err != nil:
			h.err.Inc()
		case res.Allowed:
			h.allowed.Inc()
		case dryRun:
			h.dryRun.Inc()
		case res.Degraded && !res.Fallback:
			h.unavailable.Inc()
		default:
			h.denied.Inc()
		}
	}
}

// httpPolicy is policy for the HTTP counters.
func (c *Collector) httpPolicy(name string) *httpMetrics {
	if h, ok := c.http.Load(name); ok {
		return h.(*httpMetrics)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.http.Load(name); ok {
		return h.(*httpMetrics)
	}
	h := &httpMetrics{
		allowed:     c.requests.WithLabelValues(name, OutcomeAllowed),
		denied:      c.requests.WithLabelValues(name, OutcomeDenied),
		unavailable: c.requests.WithLabelValues(name, OutcomeUnavailable),
		dryRun:      c.requests.WithLabelValues(name, OutcomeDryRun),
		keyError:    c.requests.WithLabelValues(name, OutcomeKeyError),
		err:         c.requests.WithLabelValues(name, OutcomeError),
	}
	c.http.Store(name, h)
	return h
}
