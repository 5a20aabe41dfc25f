package core

import (
	"context"
	"math/bits"
	"time"
)

// Store keeps the buckets (and a Concurrency's leases) and decides
// atomically: NewRedisStore shares them across instances, NewMemoryStore
// keeps them in this process. It is sealed (its other methods are
// unexported): every guarantee a limiter makes — all or nothing across
// limits, exactly once under re-sent calls, the store's clock, leases
// that end by themselves — is the store's, and only these two are tested
// to keep them.
//
// A Store is safe for concurrent use, and may be shared by any number of
// limiters.
type Store interface {
	// Take decides whether subject may spend n tokens under every policy
	// at once, without a Limiter: all or nothing, so a denial by one
	// policy takes nothing from the others. It returns the binding
	// policy's outcome (Outcome.Policy is its index): when denied, the
	// denying policy with the longest RetryAfter; when allowed, the policy
	// with the fewest tokens left. When each is not nil (len(each) ==
	// len(policies)), Take also fills in every policy's outcome. An error
	// means the store could not decide, or the request was malformed: an
	// empty subject (ErrEmptyKey), n < 1 (ErrInvalidCost), n above a
	// policy's burst (ErrCostTooHigh), or a policy New would refuse
	// (ErrInvalidLimit). The stores' Peek answers as Take would, writing
	// nothing; their Refund adds n tokens under every policy, each capped
	// at its capacity; their Reset makes the buckets full.
	Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error)

	storeCalls
}

// Policy is one limit in the integer form the stores' Take, Peek, Refund
// and Reset compute with: tokens are counted in units, Unit units to a
// token, and Refill units arrive every Tick microseconds (1, or 1000 or
// 10^6 for limits whose numbers would not fit below 2^53 in
// microseconds). Both stay exact: no rounding ever accumulates. Build
// policies with Policies.
type Policy struct {
	Name     string // namespaces the bucket: one bucket per (Name, subject)
	Capacity int64  // bucket capacity in units (Burst × Unit)
	Refill   int64  // units added per tick
	Unit     int64  // units per token
	Tick     int64  // µs per tick

	desc string // "Capacity:Refill:Unit:Tick", RedisStore's script argument, built once
	arg  any    // desc, boxed once
	mem  memKey // MemoryStore's, built once
}

// Outcome is a store's answer for one policy (Take, Peek, Refund).
type Outcome struct {
	Allowed    bool
	Policy     int           // index of the policy this outcome is for
	Remaining  int64         // whole tokens left after the decision
	RetryAfter time.Duration // when denied: until n tokens exist; else 0
	ResetAfter time.Duration // until the bucket is full

	extra int64 // a waiting operation's (see waitops.go): a reservation's time on the store's clock (µs), a charge's tokens forgiven
}

// checkTake rejects what no store may decide: an empty subject (one bucket
// for everyone, and an empty Cluster hash tag), a cost below 1, a cost
// above a policy's burst (it could never be served, and n × Unit could
// overflow), or a policy New would refuse (ErrInvalidLimit: its numbers must
// stay below 2^53, where the arithmetic is exact and cannot overflow).
// Limiter checks these first; this guards direct store use.
func checkTake(subject string, n int, policies []Policy) error {
	switch {
	case subject == "":
		return ErrEmptyKey
	case n < 1:
		return ErrInvalidCost
	case len(policies) == 0:
		return ErrInvalidConfig
	}
	for i := range policies {
		p := &policies[i]
		if p.Unit <= 0 || p.Refill <= 0 || p.Tick <= 0 || p.Capacity > maxExact-p.Refill || ceilDiv(p.Capacity, p.Refill) > maxExact/p.Tick {
			return ErrInvalidLimit
		}
		if int64(n) > p.Capacity/p.Unit {
			return ErrCostTooHigh
		}
	}
	return nil
}

// binds reports whether outcome o binds rather than best, among the
// outcomes of one decision (all allowed or all denied): when denied, the
// longest RetryAfter; when allowed, the fewest tokens left.
func binds(o, best Outcome) bool {
	if o.Allowed {
		return o.Remaining < best.Remaining
	}
	return o.RetryAfter > best.RetryAfter
}

// decision is one policy's answer: an Outcome without the policy index.
// The memory store's hot path returns it rather than an Outcome (see
// BENCHMARKS.md, "Tricks kept").
type decision struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

func (d decision) outcome(policy int) Outcome {
	return Outcome{Allowed: d.allowed, Policy: policy, Remaining: d.remaining, RetryAfter: d.retryAfter, ResetAfter: d.resetAfter}
}

// decide computes one policy's decision from its stored state. tokens is
// the unit count refilled to now (µs); it returns the decision and the
// units left if the request is taken. Refills come at whole ticks, so a
// wait is counted to a tick boundary, from now.
func (p *Policy) decide(tokens int64, n int, allowed bool, now int64) (d decision, left int64) {
	need := int64(n) * p.Unit
	left = tokens
	var phase int64 // µs since the last tick boundary
	if p.Tick != 1 {
		phase = now % p.Tick
	}
	if allowed {
		left -= need
	} else if tokens < need {
		d.retryAfter = time.Duration(ceilDiv(need-tokens, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	d.allowed = allowed
	d.remaining = max(0, left/p.Unit) // none while the bucket owes tokens
	if left < p.Capacity {
		d.resetAfter = time.Duration(ceilDiv(p.Capacity-left, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	return d, left
}

// refill returns the units in a bucket that held units at µs ts, at µs now:
// Refill for every tick boundary passed. Elapsed time is clamped at zero
// (clocks can move back on failover).
func (p *Policy) refill(units, ts, now int64) int64 {
	el := now - ts
	if p.Tick != 1 {
		el = now/p.Tick - ts/p.Tick
	}
	if el <= 0 || units >= p.Capacity {
		return min(units, p.Capacity)
	}
	// el × Refill, in 128 bits: it overflows for a long idle bucket.
	hi, lo := bits.Mul64(uint64(el), uint64(p.Refill))
	if hi != 0 || lo >= uint64(p.Capacity-units) {
		return p.Capacity
	}
	return units + int64(lo)
}
