package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/core"
)

// leaseVecs are the metrics of in-flight limits (core.Concurrency).
type leaseVecs struct {
	held     *prometheus.GaugeVec
	renewals *prometheus.CounterVec
	expiries *prometheus.CounterVec
}

// leaseMetrics holds one in-flight limit's children.
type leaseMetrics struct {
	held               prometheus.Gauge
	renewals, expiries prometheus.Counter
}

func newLeaseVecs(ns string) leaseVecs {
	return leaseVecs{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "inflight_held",
			Help: "Slots of an in-flight limit held by this instance's requests (acquired, not yet released); sum over instances for the total.",
		}, []string{"policy"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "lease_renewals_total",
			Help: "Leases of an in-flight limit extended by this instance's renewals (requests running longer than Lease/6).",
		}, []string{"policy"}),
		expiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "lease_expiries_total",
			Help: "Leases of an in-flight limit found past their deadline and removed by this instance's store calls: their holders, on any instance, stopped renewing without releasing.",
		}, []string{"policy"}),
	}
}

func (v *leaseVecs) describe(ch chan<- *prometheus.Desc) {
	v.held.Describe(ch)
	v.renewals.Describe(ch)
	v.expiries.Describe(ch)
}

func (v *leaseVecs) collect(ch chan<- prometheus.Metric) {
	v.held.Collect(ch)
	v.renewals.Collect(ch)
	v.expiries.Collect(ch)
}

// Leases implements core.LeaseObserver.
func (c *Collector) Leases(e core.LeaseEvent) {
	p := c.policy(e.Policy)
	l := p.leases.Load()
	if l == nil {
		l = &leaseMetrics{
			held:     c.leases.held.WithLabelValues(e.Policy),
			renewals: c.leases.renewals.WithLabelValues(e.Policy),
			expiries: c.leases.expiries.WithLabelValues(e.Policy),
		}
		if !p.leases.CompareAndSwap(nil, l) {
			l = p.leases.Load()
		}
	}
	if e.Held != 0 {
		l.held.Add(float64(e.Held))
	}
	if e.Renewed > 0 {
		l.renewals.Add(float64(e.Renewed))
	}
	if e.Expired > 0 {
		l.expiries.Add(float64(e.Expired))
	}
}
