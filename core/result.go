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
}
