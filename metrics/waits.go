package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/core"
)

// waitVecs are the metrics of bookings and charges (core.WaitObserver):
// no key labels, as every metric here.
type waitVecs struct {
	waits    *prometheus.CounterVec
	delay    *prometheus.CounterVec
	charged  *prometheus.CounterVec
	forgiven *prometheus.CounterVec
}

// waitMetrics holds one policy's children.
type waitMetrics struct {
	booked, refused, degraded prometheus.Counter
	delay, charged, forgiven  prometheus.Counter
}

func newWaitVecs(ns string) waitVecs {
	return waitVecs{
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "waits_total",
			Help: "Reservations (ReserveN, WaitN, nethttp's Transport and WithDelay) by policy and outcome (booked, refused: it would wait too long, degraded: FailMode decided).",
		}, []string{"policy", "outcome"}),
		delay: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "wait_seconds_total",
			Help: "Delay booked by reservations, in seconds: divided by waits_total{outcome=\"booked\"}, the mean wait.",
		}, []string{"policy"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "charged_tokens_total",
			Help: "Tokens taken after the fact by Charge.",
		}, []string{"policy"}),
		forgiven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "forgiven_tokens_total",
			Help: "Tokens of charges beyond the debt a bucket may owe, forgiven.",
		}, []string{"policy"}),
	}
}

func (v *waitVecs) describe(ch chan<- *prometheus.Desc) {
	v.waits.Describe(ch)
	v.delay.Describe(ch)
	v.charged.Describe(ch)
	v.forgiven.Describe(ch)
}

func (v *waitVecs) collect(ch chan<- prometheus.Metric) {
	v.waits.Collect(ch)
	v.delay.Collect(ch)
	v.charged.Collect(ch)
	v.forgiven.Collect(ch)
}

// Waited implements core.WaitObserver.
func (c *Collector) Waited(e core.WaitEvent) {
	p := c.policy(e.Policy)
	w := p.waits.Load()
	if w == nil {
		w = &waitMetrics{
			booked:   c.waits.waits.WithLabelValues(e.Policy, "booked"),
			refused:  c.waits.waits.WithLabelValues(e.Policy, "refused"),
			degraded: c.waits.waits.WithLabelValues(e.Policy, "degraded"),
			delay:    c.waits.delay.WithLabelValues(e.Policy),
			charged:  c.waits.charged.WithLabelValues(e.Policy),
			forgiven: c.waits.forgiven.WithLabelValues(e.Policy),
		}
		if !p.waits.CompareAndSwap(nil, w) {
			w = p.waits.Load()
		}
	}
	switch {
	case e.Charge:
		w.charged.Add(float64(e.N))
		if e.Forgiven > 0 {
			w.forgiven.Add(float64(e.Forgiven))
		}
	case e.Degraded:
		w.degraded.Inc()
	case e.Booked:
		w.booked.Inc()
		w.delay.Add(e.Delay.Seconds())
	default:
		w.refused.Inc()
	}
}
