package metrics

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/core"
)

// DefaultBuckets are the store latency histogram's upper bounds, in seconds:
// 100µs to 100ms, around a Redis round trip and core.DefaultTimeout (50ms).
var DefaultBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}

// Outcome label values of ratelimit_decisions_total.
const (
	OutcomeAllowed         = "allowed"
	OutcomeDenied          = "denied"
	OutcomeDegradedAllowed = "degraded_allowed"
	OutcomeDegradedDenied  = "degraded_denied"
	// A refusal in dry-run mode (core.WithDryRun): the request went through.
	OutcomeWouldDeny         = "would_deny"
	OutcomeDegradedWouldDeny = "degraded_would_deny"
)

// Kind label values of ratelimit_store_errors_total: the reason a decision
// was degraded, matched with errors.Is against core's sentinel errors.
const (
	KindTimeout     = "timeout"      // core.ErrTimeout: the store took longer than Config.Timeout
	KindCircuitOpen = "circuit_open" // core.ErrCircuitOpen: the breaker kept the store uncalled
	KindOverloaded  = "overloaded"   // core.ErrOverloaded: too many store decisions in flight
	KindOther       = "other"        // anything else: connection refused, a bad reply, …
)

// Collector counts rate-limit decisions for Prometheus. It implements
// core.Observer (set it as core.Config.Observer of one or more limiters,
// or core.ConcurrencyConfig.Observer: it is a core.LeaseObserver too) and
// prometheus.Collector (register it once). See the package documentation for
// the metrics.
//
// A Collector is safe for concurrent use. Its zero value is not usable; make
// one with New.
type Collector struct {
	decisions   *prometheus.CounterVec
	cacheHits   *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	breaker     *prometheus.GaugeVec
	instances   *prometheus.GaugeVec
	requests    *prometheus.CounterVec
	leases      leaseVecs
	waits       waitVecs
	borrow      borrowVecs

	mu       sync.Mutex // serialises additions to policies and http
	policies sync.Map   // policy name → *policyMetrics
	http     sync.Map   // policy name → *httpMetrics
}

var (
	_ core.Observer        = (*Collector)(nil)
	_ core.LeaseObserver   = (*Collector)(nil)
	_ core.WaitObserver    = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// policyMetrics holds one policy's children, resolved once so that a
// decision costs no label lookup.
type policyMetrics struct {
	allowed, denied, degradedAllowed, degradedDenied prometheus.Counter
	wouldDeny, degradedWouldDeny                     prometheus.Counter
	cacheHits                                        prometheus.Counter
	latency                                          prometheus.Observer
	timeout, circuitOpen, overloaded, other          prometheus.Counter
	breaker                                          prometheus.Gauge
	instances                                        atomic.Pointer[prometheus.Gauge] // a FailLocal policy's, from its first decision
	leases                                           atomic.Pointer[leaseMetrics]     // an in-flight limit's, from its first lease event
	waits                                            atomic.Pointer[waitMetrics]      // from the policy's first booking or charge
	borrow                                           atomic.Pointer[borrowMetrics]    // from the policy's first decision from a slice
}

// Option configures New.
type Option func(*options)

type options struct {
	namespace string
	buckets   []float64
}

// WithNamespace sets the prefix of every metric name; default "ratelimit".
func WithNamespace(ns string) Option {
	return func(o *options) { o.namespace = ns }
}

// WithBuckets sets the upper bounds, in seconds, of the store latency
// histogram; default DefaultBuckets.
func WithBuckets(bounds ...float64) Option {
	return func(o *options) { o.buckets = bounds }
}

// New returns a Collector with opts applied. Register it with a
// prometheus.Registerer before its metrics can be scraped. New panics if an
// option is nil.
func New(opts ...Option) *Collector {
	o := options{namespace: "ratelimit"}
	for _, opt := range opts {
		if opt == nil {
			panic("metrics: nil Option")
		}
		opt(&o)
	}
	if o.buckets == nil {
		o.buckets = DefaultBuckets
	}
	ns := o.namespace
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "decisions_total",
			Help: "Rate-limit decisions by policy and outcome (allowed, denied, degraded_allowed, degraded_denied; in dry-run mode would_deny, degraded_would_deny).",
		}, []string{"policy", "outcome"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "denial_cache_hits_total",
			Help: "Denials served by the local denial cache without a store call; also counted as denied (or would_deny) decisions.",
		}, []string{"policy"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "store_latency_seconds",
			Help:    "Time spent waiting for the store, per decision that asked it.",
			Buckets: o.buckets,
		}, []string{"policy"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "store_errors_total",
			Help: "Degraded decisions by policy and reason (timeout, circuit_open, overloaded, other).",
		}, []string{"policy", "kind"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "breaker_open",
			Help: "1 while the policy's circuit breaker keeps the store uncalled, else 0.",
		}, []string{"policy"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "fail_local_instances",
			Help: "FailLocal's instance count in use: its in-process buckets hold the limit divided by it (core.Config.Instances, or the live count learned).",
		}, []string{"policy"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "http_requests_total",
			Help: "HTTP requests seen by the middleware, by policy and outcome (allowed, denied, unavailable, dry_run, key_error, error).",
		}, []string{"policy", "outcome"}),
	}
	c.leases = newLeaseVecs(ns)
	c.waits = newWaitVecs(ns)
	c.borrow = newBorrowVecs(ns)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.cacheHits.Describe(ch)
	c.latency.Describe(ch)
	c.storeErrors.Describe(ch)
	c.breaker.Describe(ch)
	c.instances.Describe(ch)
	c.requests.Describe(ch)
	c.leases.describe(ch)
	c.waits.describe(ch)
	c.borrow.describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.cacheHits.Collect(ch)
	c.latency.Collect(ch)
	c.storeErrors.Collect(ch)
	c.breaker.Collect(ch)
	c.instances.Collect(ch)
	c.requests.Collect(ch)
	c.leases.collect(ch)
	c.waits.collect(ch)
	c.borrow.collect(ch)
}

// Decision implements core.Observer.
func (c *Collector) Decision(e core.DecisionEvent) {
	p := c.policy(e.Policy)
	switch {
	case e.Degraded && e.Allowed:
		p.degradedAllowed.Inc()
	case e.Degraded && e.DryRun:
		p.degradedWouldDeny.Inc()
	case e.Degraded:
		p.degradedDenied.Inc()
	case e.Allowed:
		p.allowed.Inc()
	case e.DryRun:
		p.wouldDeny.Inc()
	default:
		p.denied.Inc()
	}
	if e.Cached {
		p.cacheHits.Inc()
	}
	if e.Latency > 0 {
		p.latency.Observe(e.Latency.Seconds())
	}
	if e.Degraded {
		p.storeError(e.Err).Inc()
	}
	if e.Instances > 0 {
		c.instancesOf(p, e.Policy).Set(float64(e.Instances))
	}
	if e.Borrowed {
		b := c.borrowOf(p, e.Policy)
		b.decisions.Inc()
		if e.Lent > 0 {
			b.lent.Add(float64(e.Lent))
		}
		if e.Returned > 0 {
			b.returned.Add(float64(e.Returned))
		}
	}
}

// instancesOf returns p's FailLocal instance gauge, resolving it on first
// sight: a policy of another FailMode has none.
func (c *Collector) instancesOf(p *policyMetrics, name string) prometheus.Gauge {
	if g := p.instances.Load(); g != nil {
		return *g
	}
	g := c.instances.WithLabelValues(name)
	if !p.instances.CompareAndSwap(nil, &g) {
		return *p.instances.Load()
	}
	return g
}

// BreakerChange implements core.Observer.
func (c *Collector) BreakerChange(policy string, open bool) {
	v := 0.0
	if open {
		v = 1
	}
	c.policy(policy).breaker.Set(v)
}

func (p *policyMetrics) storeError(err error) prometheus.Counter {
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

// policy returns name's children, resolving them on first sight.
func (c *Collector) policy(name string) *policyMetrics {
	if p, ok := c.policies.Load(name); ok {
		return p.(*policyMetrics)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.policies.Load(name); ok {
		return p.(*policyMetrics)
	}
	p := &policyMetrics{
		allowed:           c.decisions.WithLabelValues(name, OutcomeAllowed),
		denied:            c.decisions.WithLabelValues(name, OutcomeDenied),
		degradedAllowed:   c.decisions.WithLabelValues(name, OutcomeDegradedAllowed),
		degradedDenied:    c.decisions.WithLabelValues(name, OutcomeDegradedDenied),
		wouldDeny:         c.decisions.WithLabelValues(name, OutcomeWouldDeny),
		degradedWouldDeny: c.decisions.WithLabelValues(name, OutcomeDegradedWouldDeny),
		cacheHits:         c.cacheHits.WithLabelValues(name),
		latency:           c.latency.WithLabelValues(name),
		timeout:           c.storeErrors.WithLabelValues(name, KindTimeout),
		circuitOpen:       c.storeErrors.WithLabelValues(name, KindCircuitOpen),
		overloaded:        c.storeErrors.WithLabelValues(name, KindOverloaded),
		other:             c.storeErrors.WithLabelValues(name, KindOther),
		breaker:           c.breaker.WithLabelValues(name),
	}
	p.breaker.Set(0)
	c.policies.Store(name, p)
	return p
}
