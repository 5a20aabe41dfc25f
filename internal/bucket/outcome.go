package bucket

import "time"

// Outcome is a store's answer for one policy.
type Outcome struct {
	Allowed    bool
	Policy     int           // index of the policy this outcome is for
	Remaining  int64         // whole tokens left after the decision
	RetryAfter time.Duration // when denied: until n tokens exist; else 0
	ResetAfter time.Duration // until the bucket is full

	// Extra is a waiting operation's: a reservation's time on the store's
	// clock (µs), a charge's tokens forgiven.
	Extra int64
}

// Binds reports whether outcome o binds rather than best, among the
// outcomes of one decision (all allowed or all denied): when denied, the
// longest RetryAfter; when allowed, the fewest tokens left.
func Binds(o, best Outcome) bool {
	if o.Allowed {
		return o.Remaining < best.Remaining
	}
	return o.RetryAfter > best.RetryAfter
}

// Decision is one policy's answer: an Outcome without the policy index.
// The memory store's hot path returns it rather than an Outcome (see
// BENCHMARKS.md, "Tricks kept").
type Decision struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Outcome returns d as the outcome of the policy at index policy.
func (d Decision) Outcome(policy int) Outcome {
	return Outcome{Allowed: d.Allowed, Policy: policy, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
}
