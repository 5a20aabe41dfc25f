package core

import "time"

// Observer watches a Limiter's decisions: metrics, tracing and logs attach
// here without the library importing them (see package
// github.com/sluicehq/ratelimit/metrics for Prometheus). Methods are called
// on the request's goroutine and must be fast and safe for concurrent use.
type Observer interface {
	// Decision is called once for every decision AllowN returns without
	// an error.
	Decision(e DecisionEvent)
	// BreakerChange is called when the circuit breaker opens (the store
	// stops being called) or closes (a probe succeeded).
	BreakerChange(policy string, open bool)
}

// DecisionEvent describes one decision to an Observer.
type DecisionEvent struct {
	Policy   string        // the limiter's policy name (Config.Name)
	Allowed  bool          // the answer
	Degraded bool          // the store could not decide; FailMode did
	Cached   bool          // the local denial cache decided, without the store
	Latency  time.Duration // time spent waiting for the store; 0 when not asked
	Err      error         // why the decision was degraded, else nil
}
