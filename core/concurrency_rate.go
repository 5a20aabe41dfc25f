package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// A Concurrency with a Rate takes a slot of key and one token of the
// Rate together or not at all, in one store call (bucket.LeaseAsk
// with Policies). On Redis the lease set and the buckets share a hash tag:
// the leases live under the subject of the Rate's buckets.

// settleRate builds the Result of an acquire with a Rate from the store's
// answers (a, and req's outcomes), and tells each observer about its own
// part: the Rate's about the tokens unless the slots refused first (the
// bucket was only peeked at), c's about the slots unless the tokens
// refused (no slot was asked). start is when the store was asked (zero:
// in process).
func (c *Concurrency) settleRate(ctx context.Context, a bucket.LeaseAnswer, req *bucket.LeaseAsk, start time.Time) Result {
	lim := c.rate
	o := req.Rate
	full := !a.Allowed && a.Held >= c.max
	r := resultOf(o, req.Each, lim.set)
	slots := PolicyResult{Name: c.name, Limit: c.limit, Remaining: max(0, c.max-a.Held), RetryAfter: a.RetryAfter, ResetAfter: a.ResetAfter}
	r.Policies = append(r.Policies, slots)
	r.Allowed = a.Allowed
	if full && (o.Allowed || slots.RetryAfter >= o.RetryAfter) {
		r.Name, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter = slots.Name, slots.Limit, slots.Remaining, slots.RetryAfter, slots.ResetAfter
	}
	if !full {
		lim.decided(ctx, DecisionEvent{Allowed: o.Allowed}, start)
	}
	if a.Allowed || full {
		c.decided(ctx, DecisionEvent{Allowed: a.Allowed}, start)
	}
	return r
}

// rateLimits returns the policies of rate, none when it is nil.
func rateLimits(rate *Limiter) []bucket.Policy {
	if rate == nil {
		return nil
	}
	return rate.set.policies
}
