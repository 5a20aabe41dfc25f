package core

import (
	"context"
	"time"
)

// acquireRate is acquire for a Concurrency with a Rate: a slot of key and
// one token of c.rate, together or not at all, in one store call.
//
// On Redis the lease set and the buckets share a hash tag: the leases
// live under the subject of the Rate's buckets, as RedisStore keys them.
func (c *Concurrency) acquireRate(ctx context.Context, key, id string) (*Lease, Result, error) {
	lim := c.rate
	bsubj := lim.store.subject(key)
	each := make([]Outcome, len(lim.set.policies))
	if c.mem != nil {
		subj := hashSubject(key)
		var o Outcome
		a := c.mem.acquireLease(c.name, subj, id, c.max, c.lease, func(op int) bool {
			o = c.mem.apply(op, bsubj, 1, lim.set.policies, each)
			return o.Allowed
		})
		return c.grant(a, subj, id, heldInStore), c.settleRate(ctx, a, o, each, 0), nil
	}
	subj := bsubj // the buckets' subject: the leases share their hash tag
	start := time.Now()
	br := c.breakerFor(subj)
	call, probe := br.allow(c.clock())
	if !call {
		l, r := c.degradeRate(ctx, br, subj, bsubj, id, ErrCircuitOpen, time.Time{})
		return l, r, nil
	}
	var a leaseAnswer
	var o Outcome
	err := c.bounded(ctx, start, func(ctx context.Context) (err error) {
		a, o, err = c.rs.acquireWithRate(ctx, c.name, subj, id, c.max, c.lease, lim.set.policies, each)
		return err
	}, func(err error) {
		if err != nil || a.allowed {
			c.takeBack(ctx, subj, id) // its token stays spent
		}
	})
	if err != nil {
		c.storeFailed(ctx, br, probe, subj, id, err)
		l, r := c.degradeRate(ctx, br, subj, bsubj, id, err, start)
		return l, r, nil
	}
	c.storeAnswered(br, probe)
	return c.grant(a, subj, id, heldInStore), c.settleRate(ctx, a, o, each, time.Since(start)), nil
}

// settleRate builds the Result of an acquire with a Rate from the store's
// answers, and tells each observer about its own part: the Rate's about
// the tokens unless the slots refused first (the bucket was only peeked
// at), c's about the slots unless the tokens refused (no slot was asked).
func (c *Concurrency) settleRate(ctx context.Context, a leaseAnswer, o Outcome, each []Outcome, latency time.Duration) Result {
	lim := c.rate
	full := !a.allowed && a.held >= c.max
	r := resultOf(o, each, lim.set)
	slots := PolicyResult{Name: c.name, Limit: c.limit, Remaining: max(0, c.max-a.held), RetryAfter: a.retryAfter, ResetAfter: a.resetAfter}
	r.Policies = append(r.Policies, slots)
	r.Allowed = a.allowed
	if full && (o.Allowed || slots.RetryAfter >= o.RetryAfter) {
		r.Name, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter = slots.Name, slots.Limit, slots.Remaining, slots.RetryAfter, slots.ResetAfter
	}
	if !full && lim.observer != nil {
		lim.observe(ctx, opTake, DecisionEvent{Allowed: o.Allowed, Latency: latency})
	}
	if a.allowed || full {
		c.observe(ctx, a.allowed, false, latency, nil)
	}
	return r
}

// degradeRate decides an acquire with a Rate that the store could not
// answer: the slot by c's FailMode, then, if one was granted, the token
// by the Rate's (FailLocal's in-process bucket, say), giving the slot
// back when the Rate refuses.
func (c *Concurrency) degradeRate(ctx context.Context, br *breaker, subj, bsubj, id string, cause error, start time.Time) (*Lease, Result) {
	l, r := c.degrade(br, subj, id, cause)
	var latency time.Duration
	if !start.IsZero() {
		latency = time.Since(start)
	}
	c.observe(ctx, r.Allowed, true, latency, cause)
	if l == nil {
		return nil, r
	}
	lim := c.rate
	rr := lim.degrade(ctx, lim.breakers.forKey(bsubj), opTake, bsubj, 1, lim.set, cause, start)
	if !rr.Allowed {
		_ = l.Release(ctx) // held in process, or nowhere: no store call
		return nil, rr
	}
	return l, rr
}

// rateLimits returns the policies of rate, none when it is nil.
func rateLimits(rate *Limiter) []Policy {
	if rate == nil {
		return nil
	}
	return rate.set.policies
}
