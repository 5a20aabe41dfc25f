package main

import (
	"strings"

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
}

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
	}
	reg.MustRegister(m.errors, m.configLoadSuccess, m.configLoadError)
	return m
}

// descriptor counts one decided descriptor as the reference does.
func (m *refMetrics) descriptor(e envoy.DescriptorEvent) {
	rest := strings.TrimPrefix(e.Key, e.Domain+".")
	key1, key2, _ := strings.Cut(rest, ".")
	if i := strings.IndexByte(key2, '.'); i >= 0 {
		key2 = key2[:i]
	}
	l := prometheus.Labels{"domain": e.Domain, "key1": key1, "key2": key2}
	c := countHits(e, m.nearRatio)
	m.totalHits.With(l).Add(float64(e.Hits))
	m.overLimit.With(l).Add(float64(c.over))
	m.nearLimit.With(l).Add(float64(c.near))
	m.withinLimit.With(l).Add(float64(c.within))
	m.shadowMode.With(l).Add(float64(c.shadow))
}

func (m *refMetrics) configLoaded(ok bool) {
	if ok {
		m.configLoadSuccess.Inc()
	} else {
		m.configLoadError.Inc()
	}
}

func (m *refMetrics) callError(kind string) { m.errors.WithLabelValues(kind).Inc() }
