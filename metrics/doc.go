// Package metrics exports a rate limiter's decisions to Prometheus.
//
// A Collector is both a core.Observer, given to core.Config.Observer, and a
// prometheus.Collector, registered once:
//
//	m := metrics.New()
//	prometheus.MustRegister(m)
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerSecond(10), FailMode: core.FailOpen, Observer: m})
//
// One Collector serves every limiter of a process: series are labelled by
// policy (core.Config.Name). For the HTTP view, including what dry-run mode
// would have refused, pass HTTPObserver to nethttp.WithObserver (or an
// adapter's), with or without dry-run mode.
//
// # Metrics
//
// With the default namespace "ratelimit":
//
//	ratelimit_decisions_total{policy,outcome}      counter    outcome: allowed, denied, degraded_allowed, degraded_denied, would_deny, degraded_would_deny
//	ratelimit_denial_cache_hits_total{policy}      counter    denials the local denial cache gave without a store call (also counted as denied or would_deny)
//	ratelimit_store_latency_seconds{policy}        histogram  time waiting for the store, per decision that asked it
//	ratelimit_store_errors_total{policy,kind}      counter    kind: timeout, circuit_open, overloaded, other
//	ratelimit_breaker_open{policy}                 gauge      1 while the circuit breaker keeps the store uncalled, else 0
//	ratelimit_fail_local_instances{policy}         gauge      FailLocal's instance count in use (Config.Instances, or learned)
//	ratelimit_http_requests_total{policy,outcome}  counter    outcome: allowed, denied, unavailable, dry_run, key_error, error
//	ratelimit_inflight_held{policy}                gauge      slots of an in-flight limit held by this instance's requests
//	ratelimit_lease_renewals_total{policy}         counter    leases extended by this instance's renewals
//	ratelimit_lease_expiries_total{policy}         counter    leases found past their deadline (holder stopped renewing) and removed
//	ratelimit_borrowed_decisions_total{policy}     counter    decisions answered from a slice borrowed from the store (Config.Borrow; also in decisions_total)
//	ratelimit_lent_tokens_total{policy}            counter    tokens borrowed into slices
//	ratelimit_returned_tokens_total{policy}        counter    unspent tokens of slices given back
//
// An in-flight limit (core.Concurrency, this Collector as its
// ConcurrencyConfig.Observer) counts its acquires in decisions_total under
// its Name: denied is a refusal because every slot was held. Its policy
// label is always the Name, never a key. Sum inflight_held over instances
// for the slots held in all; an instance that crashed takes its series
// with it, and its leases show up in lease_expiries_total of the instances
// that prune them (a key nobody asks about again expires whole in Redis,
// uncounted).
//
// Decisions are what AllowN and AllowLimit answer; Peek and Refund are not
// counted. A refusal in dry-run mode (decided under core.WithDryRun) is
// would_deny or degraded_would_deny, never denied: the request went
// through, so a query for the share refused stays true.
//
// A degraded decision (the store could not decide; core.FailMode did) counts
// once in decisions_total as degraded_allowed, degraded_denied or
// degraded_would_deny, and once in
// store_errors_total under the reason's kind. The policy of the first five
// metrics is the limiter's Config.Name; that of http_requests_total is the
// binding limit's name (core.Result.Name), which differs only for limiters
// with Config.Extra limits. Series of a policy appear, at
// zero, with its first decision, so rate() and absent-series alerts work from
// the start.
//
// # Alerts and a dashboard
//
// The module ships Prometheus recording and alerting rules for these
// series in metrics/prometheus/rules.yml (decisions degraded, breaker
// open, store latency near Timeout, refusal and dry-run would-refuse
// shares, in-flight leases expiring unreleased), tested with promtool,
// and a Grafana dashboard in metrics/grafana/dashboard.json;
// docs/guide.md says how to load and adjust them.
//
// # Cost
//
// Decision looks the policy up in a sync.Map and updates counters
// resolved when the policy was first seen: no allocation and no lock per
// decision.
package metrics
