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
	allowed, denied, dryRun []metric.AddOption
}

// HTTPObserver returns a function for nethttp.WithObserver (and the chi,
// echo and gin adapters' WithObserver) counting requests in
// ratelimit_http_requests: allowed, denied (429, or 503 when the store is
// down and the limiter fails closed), dry_run, key_error and error, as
// metrics.Collector's HTTPObserver does. The policy attribute is the
// binding policy's name (core.Result.Name), empty for key_error and error,
// which happen before any limiter decides.
//
// One observer serves both modes: in a middleware with nethttp.WithDryRun,
// a request the limiter refused, which dry-run mode lets through, counts
// as dry_run instead of denied; the limiter's ratelimit_decisions still
// counts it as denied.
func (o *Observer) HTTPObserver() func(r *http.Request, res core.Result, err error, dryRun bool) {
	ctx := context.Background()
	noPolicy := attribute.String("policy", "")
	keyErrors := adding(metric.WithAttributeSet(attribute.NewSet(noPolicy, attribute.String("outcome", outcomeKeyError))))
	otherErrors := adding(metric.WithAttributeSet(attribute.NewSet(noPolicy, attribute.String("outcome", outcomeError))))
	o.requests.Add(ctx, 0, keyErrors...)
	o.requests.Add(ctx, 0, otherErrors...)
	return func(r *http.Request, res core.Result, err error, dryRun bool) {
		var opts []metric.AddOption
		switch {
		case err != nil && errors.Is(err, nethttp.ErrKey):
			opts = keyErrors
		case err != nil:
			opts = otherErrors
		case res.Allowed:
			opts = o.httpPolicy(res.Name).allowed
		case dryRun:
			opts = o.httpPolicy(res.Name).dryRun
		default:
			opts = o.httpPolicy(res.Name).denied
		}
		// The request's context carries its span, for exemplars.
		o.requests.Add(r.Context(), 1, opts...)
	}
}

// httpPolicy is policy for the HTTP counter.
func (o *Observer) httpPolicy(name string) *httpMetrics {
	if h := (*o.http.Load())[name]; h != nil {
		return h
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.http.Load()
	if h := old[name]; h != nil {
		return h
	}
	policy := attribute.String("policy", name)
	set := func(outcome string) []metric.AddOption {
		return adding(metric.WithAttributeSet(attribute.NewSet(policy, attribute.String("outcome", outcome))))
	}
	h := &httpMetrics{allowed: set(outcomeAllowed), denied: set(outcomeDenied), dryRun: set(outcomeDryRun)}
	ctx := context.Background()
	for _, opts := range [][]metric.AddOption{h.allowed, h.denied, h.dryRun} {
		o.requests.Add(ctx, 0, opts...)
	}
	o.http.Store(withEntry(old, name, h))
	return h
}
