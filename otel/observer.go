package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/ratelimit/core"
)

// scope is the instrumentation scope of every instrument: the Meter's name.
const scope = "github.com/sluicehq/ratelimit/otel"

// Instrument names are underscored, not dotted, so that every OTel to
// Prometheus translation that adds suffixes (escaping or UTF-8) yields the
// metrics package's series names; units carry the suffixes.
const (
	nameDecisions   = "ratelimit_decisions"         // counter → ratelimit_decisions_total
	nameCacheHits   = "ratelimit_denial_cache_hits" // counter → ratelimit_denial_cache_hits_total
	nameLatency     = "ratelimit_store_latency"     // histogram, unit s → ratelimit_store_latency_seconds
	nameStoreErrors = "ratelimit_store_errors"      // counter → ratelimit_store_errors_total
	nameBreaker     = "ratelimit_breaker_open"      // gauge, no unit (unit "1" would add _ratio)
	nameRequests    = "ratelimit_http_requests"     // counter → ratelimit_http_requests_total
)

// Attribute values: those of package metrics, which this package does not
// import so that an OTel user's build never links the Prometheus client.
const (
	outcomeAllowed           = "allowed"
	outcomeDenied            = "denied"
	outcomeDegradedAllowed   = "degraded_allowed"
	outcomeDegradedDenied    = "degraded_denied"
	outcomeWouldDeny         = "would_deny"
	outcomeDegradedWouldDeny = "degraded_would_deny"
	outcomeUnavailable       = "unavailable"
	outcomeDryRun            = "dry_run"
	outcomeKeyError          = "key_error"
	outcomeError             = "error"

	kindTimeout     = "timeout"
	kindCircuitOpen = "circuit_open"
	kindOverloaded  = "overloaded"
	kindOther       = "other"
)

// latencyBounds are the store latency histogram's bucket boundaries, in
// seconds: those of metrics.DefaultBuckets, 100µs to 100ms. A View of the
// SDK replaces them.
var latencyBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}

// Observer records rate-limit decisions with OpenTelemetry instruments. It
// implements core.Observer (set it as core.Config.Observer or
// core.ConcurrencyConfig.Observer of one or more limiters) and
// core.LeaseObserver (an in-flight limit's leases); HTTPObserver
// serves the middleware. See the package documentation for the
// instruments.
//
// An Observer is safe for concurrent use. Its zero value is not usable;
// make one with New.
type Observer struct {
	decisions   metric.Int64Counter
	cacheHits   metric.Int64Counter
	latency     metric.Float64Histogram
	storeErrors metric.Int64Counter
	breaker     metric.Int64Gauge
	requests    metric.Int64Counter
	leases      leaseInstruments

	mu       sync.Mutex // serialises additions to policies and http
	policies sync.Map   // policy name → *policyMetrics
	http     sync.Map   // policy name → *httpMetrics
}

var (
	_ core.Observer      = (*Observer)(nil)
	_ core.LeaseObserver = (*Observer)(nil)
)

// policyMetrics holds one policy's attribute sets, made once so that a
// decision builds no attributes.
type policyMetrics struct {
	allowed, denied, degradedAllowed, degradedDenied []metric.AddOption
	wouldDeny, degradedWouldDeny                     []metric.AddOption
	cacheHits                                        []metric.AddOption
	latency                                          []metric.RecordOption
	timeout, circuitOpen, overloaded, other          []metric.AddOption
	breaker                                          []metric.RecordOption
	leases                                           []metric.AddOption // the in-flight instruments'
	leasesSeen                                       atomic.Bool        // the in-flight series exist
}

// New returns an Observer whose instruments come from mp's Meter
// "github.com/sluicehq/ratelimit/otel"; a nil mp means the global
// provider, otel.GetMeterProvider(). The error is the provider's, should it
// refuse an instrument.
func New(mp metric.MeterProvider) (*Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(scope)
	o := &Observer{}
	var err, e error
	o.decisions, e = m.Int64Counter(nameDecisions, metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by policy and outcome (allowed, denied, degraded_allowed, degraded_denied; in dry-run mode would_deny, degraded_would_deny)."))
	err = errors.Join(err, e)
	o.cacheHits, e = m.Int64Counter(nameCacheHits, metric.WithUnit("{hit}"),
		metric.WithDescription("Denials served by the local denial cache without a store call; also counted as denied (or would_deny) decisions."))
	err = errors.Join(err, e)
	o.latency, e = m.Float64Histogram(nameLatency, metric.WithUnit("s"),
		metric.WithDescription("Time spent waiting for the store, per decision that asked it."),
		metric.WithExplicitBucketBoundaries(latencyBounds...))
	err = errors.Join(err, e)
	o.storeErrors, e = m.Int64Counter(nameStoreErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Degraded decisions by policy and reason (timeout, circuit_open, overloaded, other)."))
	err = errors.Join(err, e)
	o.breaker, e = m.Int64Gauge(nameBreaker,
		metric.WithDescription("1 while the policy's circuit breaker keeps the store uncalled, else 0."))
	err = errors.Join(err, e)
	o.requests, e = m.Int64Counter(nameRequests, metric.WithUnit("{request}"),
		metric.WithDescription("HTTP requests seen by the middleware, by policy and outcome (allowed, denied, unavailable, dry_run, key_error, error)."))
	err = errors.Join(err, e)
	o.leases, e = newLeaseInstruments(m)
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	return o, nil
}

// Decision implements core.Observer.
func (o *Observer) Decision(e core.DecisionEvent) {
	ctx := context.Background()
	p := o.policy(e.Policy)
	var outcome []metric.AddOption
	switch {
	case e.Degraded && e.Allowed:
		outcome = p.degradedAllowed
	case e.Degraded && e.DryRun:
		outcome = p.degradedWouldDeny
	case e.Degraded:
		outcome = p.degradedDenied
	case e.Allowed:
		outcome = p.allowed
	case e.DryRun:
		outcome = p.wouldDeny
	default:
		outcome = p.denied
	}
	o.decisions.Add(ctx, 1, outcome...)
	if e.Cached {
		o.cacheHits.Add(ctx, 1, p.cacheHits...)
	}
	if e.Latency > 0 {
		o.latency.Record(ctx, e.Latency.Seconds(), p.latency...)
	}
	if e.Degraded {
		o.storeErrors.Add(ctx, 1, p.storeError(e.Err)...)
	}
}

// BreakerChange implements core.Observer.
func (o *Observer) BreakerChange(policy string, open bool) {
	var v int64
	if open {
		v = 1
	}
	o.breaker.Record(context.Background(), v, o.policy(policy).breaker...)
}

func (p *policyMetrics) storeError(err error) []metric.AddOption {
	switch {
	case errors.Is(err, core.ErrTimeout):
		return p.timeout
	case errors.Is(err, core.ErrCircuitOpen):
		return p.circuitOpen
	case errors.Is(err, core.ErrOverloaded):
		return p.overloaded
	}
	return p.other
}

// policy returns name's attribute sets, making them on first sight, when
// its counters and breaker gauge start at zero (so that rate() and
// absent-series alerts work from the start).
func (o *Observer) policy(name string) *policyMetrics {
	if p, ok := o.policies.Load(name); ok {
		return p.(*policyMetrics)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.policies.Load(name); ok {
		return p.(*policyMetrics)
	}
	policy := attribute.String("policy", name)
	set := func(k, v string) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(policy, attribute.String(k, v)))
	}
	p := &policyMetrics{
		allowed:           adding(set("outcome", outcomeAllowed)),
		denied:            adding(set("outcome", outcomeDenied)),
		degradedAllowed:   adding(set("outcome", outcomeDegradedAllowed)),
		degradedDenied:    adding(set("outcome", outcomeDegradedDenied)),
		wouldDeny:         adding(set("outcome", outcomeWouldDeny)),
		degradedWouldDeny: adding(set("outcome", outcomeDegradedWouldDeny)),
		cacheHits:         adding(metric.WithAttributeSet(attribute.NewSet(policy))),
		latency:           recording(metric.WithAttributeSet(attribute.NewSet(policy))),
		timeout:           adding(set("kind", kindTimeout)),
		circuitOpen:       adding(set("kind", kindCircuitOpen)),
		overloaded:        adding(set("kind", kindOverloaded)),
		other:             adding(set("kind", kindOther)),
		breaker:           recording(metric.WithAttributeSet(attribute.NewSet(policy))),
		leases:            adding(metric.WithAttributeSet(attribute.NewSet(policy))),
	}
	ctx := context.Background()
	for _, opts := range [][]metric.AddOption{p.allowed, p.denied, p.degradedAllowed, p.degradedDenied, p.wouldDeny, p.degradedWouldDeny} {
		o.decisions.Add(ctx, 0, opts...)
	}
	o.cacheHits.Add(ctx, 0, p.cacheHits...)
	for _, opts := range [][]metric.AddOption{p.timeout, p.circuitOpen, p.overloaded, p.other} {
		o.storeErrors.Add(ctx, 0, opts...)
	}
	o.breaker.Record(ctx, 0, p.breaker...)
	o.policies.Store(name, p)
	return p
}

func adding(o metric.MeasurementOption) []metric.AddOption       { return []metric.AddOption{o} }
func recording(o metric.MeasurementOption) []metric.RecordOption { return []metric.RecordOption{o} }
