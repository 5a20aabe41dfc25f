package main

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/ratelimit/envoy"
)

// refMetrics are the reference's Prometheus series (its statsd names
// through its default statsd_exporter mapping), served beside ours
// (package metrics: ratelimit_decisions_total, …).
type refMetrics struct {
	nearRatio                                                float64
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	errors                                                   *prometheus.CounterVec
	configLoadSuccess, configLoadError                       prometheus.Counter

	// The counters of each key seen (domain and DescriptorEvent.Key), up to
	// maxStatKeys (then each domain's other_keys): a label lookup per
	// counter and descriptor costs more than the decision's own work.
	mu   sync.RWMutex
	keys map[[2]string]*refCounters
}

type refCounters struct{ total, over, near, within, shadow prometheus.Counter }

func newRefMetrics(reg prometheus.Registerer, nearRatio float64) *refMetrics {
	hits := func(what string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_" + what,
			Help: "The reference's " + what + " per rule (hits, as it counts them).",
		}, []string{"domain", "key1", "key2"})
		reg.MustRegister(c)
		return c
	}
	m := &refMetrics{
		nearRatio: nearRatio,
		totalHits: hits("total_hits"), overLimit: hits("over_limit"), nearLimit: hits("near_limit"),
		withinLimit: hits("within_limit"), shadowMode: hits("shadow_mode"),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error",
			Help: "ShouldRateLimit calls answered with an error, by err_type (redis_error, service_error).",
		}, []string{"err_type"}),
		configLoadSuccess: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_success", Help: "Config loads that succeeded.",
		}),
		configLoadError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_service_config_load_error", Help: "Config loads refused (the last good config kept serving).",
		}),
		keys: make(map[[2]string]*refCounters),
	}
	reg.MustRegister(m.errors, m.configLoadSuccess, m.configLoadError)
	return m
}

// descriptor counts one decided descriptor as the reference does.
func (m *refMetrics) descriptor(e envoy.DescriptorEvent) {
	k := m.counters(e.Domain, e.Key)
	c := countHits(e, m.nearRatio)
	k.total.Add(float64(e.Hits))
	k.over.Add(float64(c.over))
	k.near.Add(float64(c.near))
	k.within.Add(float64(c.within))
	k.shadow.Add(float64(c.shadow))
}

// counters returns the counters of a domain's key, labelled by the domain
// and the key's first two parts after it. Beyond maxStatKeys keys, new
// ones count under <domain>.other_keys, as in statsd: no stream of values
// (detailed_metric's) grows the series without bound.
func (m *refMetrics) counters(domain, key string) *refCounters {
	m.mu.RLock()
	k := m.keys[[2]string{domain, key}]
	m.mu.RUnlock()
	if k != nil {
		return k
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.keys) >= maxStatKeys {
		key = domain + ".other_keys"
	}
	if k := m.keys[[2]string{domain, key}]; k != nil {
		return k
	}
	rest := strings.TrimPrefix(key, domain+".")
	key1, key2, _ := strings.Cut(rest, ".")
	if i := strings.IndexByte(key2, '.'); i >= 0 {
		key2 = key2[:i]
	}
	l := prometheus.Labels{"domain": domain, "key1": key1, "key2": key2}
	k = &refCounters{
		total: m.totalHits.With(l), over: m.overLimit.With(l), near: m.nearLimit.With(l),
		within: m.withinLimit.With(l), shadow: m.shadowMode.With(l),
	}
	m.keys[[2]string{domain, key}] = k
	return k
}

func (m *refMetrics) configLoaded(ok bool) {
	if ok {
		m.configLoadSuccess.Inc()
	} else {
		m.configLoadError.Inc()
	}
}

func (m *refMetrics) callError(kind string) { m.errors.WithLabelValues(kind).Inc() }
