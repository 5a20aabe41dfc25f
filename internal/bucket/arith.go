package bucket

import (
	"math/bits"
	"time"
)

// CeilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// decide computes one policy's decision from its stored state. tokens is
// the unit count refilled to now (µs); it returns the decision and the
// units left if the request is taken. Refills come at whole ticks, so a
// wait is counted to a tick boundary, from now.
func (p *Policy) decide(tokens int64, n int, allowed bool, now int64) (d Decision, left int64) {
	need := int64(n) * p.Unit
	left = tokens
	var phase int64 // µs since the last tick boundary
	if p.Tick != 1 {
		phase = now % p.Tick
	}
	if allowed {
		left -= need
	} else if tokens < need {
		d.RetryAfter = time.Duration(CeilDiv(need-tokens, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	d.Allowed = allowed
	d.Remaining = max(0, left/p.Unit) // none while the bucket owes tokens
	if left < p.Capacity {
		d.ResetAfter = time.Duration(CeilDiv(p.Capacity-left, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	return d, left
}

// refill returns the units in a bucket that held units at µs ts, at µs
// now: Refill for every tick boundary passed. Elapsed time is clamped at
// zero (clocks can move back on failover).
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

// decideKept is decide, refusing, for a bucket read under p but kept
// under its own policy sp (a denied take, a peek: nothing is written),
// which holds own units, and read as st from its stamp: the waits are
// those of whichever reading gets there first, so a RetryAfter announced
// under a changed limit is the true one: the next take under p finds n
// tokens then.
func (p *Policy) decideKept(sp *policyShape, own, st, tokens int64, n int, now int64) Decision {
	d := Decision{Remaining: max(0, tokens/p.Unit)}
	need := int64(n) * p.Unit
	phase := now % sp.tick
	ds, _ := p.decide(st, n, false, now)
	if tokens < need {
		// carry(own') ≥ need ⇔ own' ≥ sp.capacity - ⌊(capacity - need) × sp.unit / Unit⌋.
		hi, lo := bits.Mul64(uint64(p.Capacity-need), uint64(sp.unit))
		var q uint64
		if hi < uint64(p.Unit) {
			q, _ = bits.Div64(hi, lo, uint64(p.Unit))
		} else {
			q = uint64(sp.capacity) // cannot happen: tokens < need means q < capacity
		}
		target := sp.capacity - int64(min(q, uint64(sp.capacity)))
		d.RetryAfter = min(ds.RetryAfter, time.Duration(CeilDiv(target-own, sp.refill)*sp.tick-phase)*time.Microsecond)
	}
	if tokens < p.Capacity {
		d.ResetAfter = min(ds.ResetAfter, time.Duration(CeilDiv(sp.capacity-own, sp.refill)*sp.tick-phase)*time.Microsecond)
	}
	return d
}

// carry returns the units under p of a bucket holding tok units under
// shape sp: a debt as it is, ⌈debt × p.Unit / sp.unit⌉ (so a limit that
// changes keeps what is owed), else p's capacity less what was spent,
// ⌈spent × p.Unit / sp.unit⌉ (rounded only here, where the scale
// changes), clamped to [0, capacity]. lost reports a spend beyond p's
// capacity: clamped, p's units cannot tell how far beyond.
func carry(p *Policy, sp *policyShape, tok int64) (units int64, lost bool) {
	if tok < 0 {
		hi, lo := bits.Mul64(uint64(-tok), uint64(p.Unit))
		if hi >= uint64(sp.unit) {
			return -MaxExact, false // beyond any debt a policy can hold
		}
		q, r := bits.Div64(hi, lo, uint64(sp.unit))
		if r != 0 {
			q++
		}
		return -int64(min(q, MaxExact)), false
	}
	spent := sp.capacity - tok
	if spent <= 0 {
		return p.Capacity, false
	}
	hi, lo := bits.Mul64(uint64(spent), uint64(p.Unit))
	if hi >= uint64(sp.unit) {
		return 0, true // the quotient does not even fit in 64 bits
	}
	q, r := bits.Div64(hi, lo, uint64(sp.unit))
	if q >= uint64(p.Capacity) {
		return 0, q > uint64(p.Capacity) || r != 0
	}
	if r != 0 {
		q++ // at most the capacity now
	}
	return p.Capacity - int64(q), false
}

// rescale returns d units of p in units of shape sp, rounded down (toward
// fewer tokens, more debt), within ±MaxExact: what an operation under p
// took (d < 0) or gave back, counted in a bucket sp wrote (see written).
func rescale(d int64, p *Policy, sp *policyShape) int64 {
	m := uint64(d)
	if d < 0 {
		m = uint64(-d)
	}
	hi, lo := bits.Mul64(m, uint64(sp.unit))
	if hi >= uint64(p.Unit) {
		if d < 0 {
			return -MaxExact
		}
		return MaxExact
	}
	q, r := bits.Div64(hi, lo, uint64(p.Unit))
	if d >= 0 {
		return int64(min(q, MaxExact))
	}
	if r != 0 {
		q++
	}
	return -int64(min(q, MaxExact))
}
