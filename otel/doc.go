// Package otel records a rate limiter's decisions with OpenTelemetry
// metric instruments (go.opentelemetry.io/otel/metric): the observations
// that package metrics exports to Prometheus, under names that OTel's
// Prometheus exporter turns into the same ratelimit_* series.
//
// An Observer is a core.Observer, given to core.Config.Observer (or
// core.ConcurrencyConfig.Observer: it is a core.LeaseObserver too), and
// its HTTPObserver goes to nethttp.WithObserver (or an adapter's):
//
//	o, err := otel.New(provider) // a metric.MeterProvider; nil: the global one
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerSecond(10), FailMode: core.FailOpen, Observer: o})
//	mw := ratelimit.Middleware(lim, ratelimit.WithObserver(o.HTTPObserver()))
//
// One Observer serves every limiter of a process: data points carry the
// policy (core.Config.Name or core.ConcurrencyConfig.Name), never a
// client's key.
//
// # Instruments
//
// Meter "github.com/sluicehq/ratelimit/otel"; the Prometheus series each
// becomes through go.opentelemetry.io/otel/exporters/prometheus:
//
//	ratelimit_decisions          counter {decision}  policy, outcome  → ratelimit_decisions_total
//	ratelimit_denial_cache_hits  counter {hit}       policy           → ratelimit_denial_cache_hits_total
//	ratelimit_store_latency      histogram s         policy           → ratelimit_store_latency_seconds
//	ratelimit_store_errors       counter {error}     policy, kind     → ratelimit_store_errors_total
//	ratelimit_breaker_open       gauge               policy           → ratelimit_breaker_open
//	ratelimit_http_requests      counter {request}   policy, outcome  → ratelimit_http_requests_total
//	ratelimit_inflight_held      up-down {slot}      policy           → ratelimit_inflight_held (gauge)
//	ratelimit_lease_renewals     counter {lease}     policy           → ratelimit_lease_renewals_total
//	ratelimit_lease_expiries     counter {lease}     policy           → ratelimit_lease_expiries_total
//
// The attribute values, the meaning of each instrument (dry-run refusals
// are would_deny, never denied; peeks and refunds are not decisions) and
// the descriptions are package metrics' own. Names are underscored rather
// than dotted so that both the escaping and the UTF-8 translation
// strategies of the exporter give the same names. The latency histogram's
// bucket boundaries, 100µs to 100ms, are advice that an SDK View
// overrides.
//
// Two differences from package metrics. The exporter adds what it adds to
// any OTel metric: a target_info series and otel_scope_name,
// otel_scope_version and otel_scope_schema_url labels, which its options
// WithoutTargetInfo and WithoutScopeInfo turn off. And a histogram has no
// series until its first observation, so ratelimit_store_latency_seconds
// appears with the first decision that asked the store (never for a
// memory store), while counters and the breaker gauge appear at zero with
// the policy's first decision, and an in-flight limit's three series at
// zero with its first lease event, as in package metrics.
//
// # Module
//
// This package is a module of its own, github.com/sluicehq/ratelimit/otel,
// so that a Prometheus-only user never downloads OpenTelemetry: their
// go.sum does not change. It requires the github.com/sluicehq/ratelimit
// release of the same version; the replace directive in its go.mod points
// at the parent directory for development in this repository, and Go
// ignores it in any other module's build. The package does not import
// package metrics, so it links no Prometheus client either.
package otel
