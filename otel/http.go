package otel

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// httpMetrics holds one policy's ratelimit_http_requests attribute sets.
type httpMetrics struct {
	allowed, denied, unavailable, dryRun, keyError, err []metric.AddOption
}

// HTTPObserver returns a function for nethttp.WithObserver (and the chi,
// echo and gin adapters' WithObserver) counting requests in
// ratelimit_http_requests: allowed, denied (429: the limit refused),
// unavailable (503: the store was down and the limiter fails closed),
// dry_run, key_error and error, as metrics.Collector's HTTPObserver does.
// The policy attribute is the binding policy's name (core.Result.Name);
// for key_error and error, the policy of the middleware's limiter (the
// default one for a key error, which comes before any limiter is chosen).
//
// One observer serves both modes: in a middleware with nethttp.WithDryRun,
// a request the limiter refused, which dry-run mode lets through, counts
// as dry_run instead of denied or unavailable; the limiter's
// ratelimit_decisions still counts it as denied.
func (o *Observer) HTTPObserver() func(r *http.Request, res core.Result, err error, dryRun bool) {
	return func(r *http.Request, res core.Result, err error, dryRun bool) {
		h := o.httpPolicy(res.Name)
		var opts []metric.AddOption
		switch {
		case err != nil && errors.Is(err, nethttp.ErrKey):
			opts = h.keyError
		case err != nil:
			opts = h.err
		case res.Allowed:
			opts = h.allowed
		case dryRun:
			opts = h.dryRun
		case res.Degraded && !res.Fallback:
			opts = h.unavailable
		default:
			opts = h.denied
		}
		// The request's context carries its span, for exemplars.
		o.requests.Add(r.Context(), 1, opts...)
	}
}

// httpPolicy is policy for the HTTP counter.
func (o *Observer) httpPolicy(name string) *httpMetrics {
	if h, ok := o.http.Load(name); ok {
		return h.(*httpMetrics)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if h, ok := o.http.Load(name); ok {
		return h.(*httpMetrics)
	}
	policy := attribute.String("policy", name)
	set := func(outcome string) []metric.AddOption {
		return adding(metric.WithAttributeSet(attribute.NewSet(policy, attribute.String("outcome", outcome))))
	}
	h := &httpMetrics{allowed: set(outcomeAllowed), denied: set(outcomeDenied), unavailable: set(outcomeUnavailable),
		dryRun: set(outcomeDryRun), keyError: set(outcomeKeyError), err: set(outcomeError)}
	ctx := context.Background()
	for _, opts := range [][]metric.AddOption{h.allowed, h.denied, h.unavailable, h.dryRun, h.keyError, h.err} {
		o.requests.Add(ctx, 0, opts...)
	}
	o.http.Store(name, h)
	return h
}
