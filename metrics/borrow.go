package metrics

import "github.com/prometheus/client_golang/prometheus"

// borrowVecs are the metrics of hot keys decided from borrowed slices
// (core.Config.Borrow): no key labels, as every metric here.
type borrowVecs struct {
	decisions *prometheus.CounterVec
	lent      *prometheus.CounterVec
	returned  *prometheus.CounterVec
}

// borrowMetrics holds one policy's children.
type borrowMetrics struct {
	decisions, lent, returned prometheus.Counter
}

func newBorrowVecs(ns string) borrowVecs {
	return borrowVecs{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "borrowed_decisions_total",
			Help: "Decisions answered from a slice borrowed from the store (Config.Borrow), part of decisions_total.",
		}, []string{"policy"}),
		lent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "lent_tokens_total",
			Help: "Tokens borrowed into slices; less returned_tokens_total and borrowed decisions' cost, the tokens on loan unspent or lost at their loans' end.",
		}, []string{"policy"}),
		returned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "returned_tokens_total",
			Help: "Unspent tokens of slices given back, with the next borrow.",
		}, []string{"policy"}),
	}
}

func (v *borrowVecs) describe(ch chan<- *prometheus.Desc) {
	v.decisions.Describe(ch)
	v.lent.Describe(ch)
	v.returned.Describe(ch)
}

func (v *borrowVecs) collect(ch chan<- prometheus.Metric) {
	v.decisions.Collect(ch)
	v.lent.Collect(ch)
	v.returned.Collect(ch)
}

// borrowOf returns p's borrow counters, resolving them on first sight: a
// policy that never borrows has none.
func (c *Collector) borrowOf(p *policyMetrics, name string) *borrowMetrics {
	if b := p.borrow.Load(); b != nil {
		return b
	}
	b := &borrowMetrics{
		decisions: c.borrow.decisions.WithLabelValues(name),
		lent:      c.borrow.lent.WithLabelValues(name),
		returned:  c.borrow.returned.WithLabelValues(name),
	}
	if !p.borrow.CompareAndSwap(nil, b) {
		b = p.borrow.Load()
	}
	return b
}
