package core

import "time"

// Result is one rate-limit decision.
type Result struct {
	Allowed    bool
	Limit      Limit         // the limit this result describes (the binding one)
	Name       string        // that limit's policy name
	Remaining  int           // whole tokens left after this decision
	RetryAfter time.Duration // when denied: until n tokens are available; 0 when allowed
	ResetAfter time.Duration // until the bucket is full again
	Degraded   bool          // the store could not decide; FailMode did
	Fallback   bool          // Degraded, and FailLocal's in-process bucket decided: a real (approximate) limit, not a blanket answer

	// Policies lists every limit's part of the decision when the limiter
	// has several (Config.Extra), in configuration order; nil otherwise.
	Policies []PolicyResult

	extra int64 // bucket.Outcome.Extra: a reservation's time on the store's clock, a charge's tokens forgiven
}

// PolicyResult is one limit's part of a multi-limit decision.
type PolicyResult struct {
	Name       string
	Limit      Limit
	Remaining  int
	RetryAfter time.Duration // 0 unless this limit lacked the tokens
	ResetAfter time.Duration
}
