package bucket

import "time"

// waiting is the arithmetic of a waiting operation (kind, with argument
// x) on p's bucket, which holds tok units, for n tokens, at now: the units
// left, the wait (a reservation's until its tokens exist, a charge's until
// a token does) and extra, raised to this policy's (a charge's tokens
// forgiven). It is the script's waiting, line for line.
func (p *Policy) waiting(kind int, x int64, n int, tok, extra, now int64) (left int64, wait time.Duration, _ int64) {
	phase := now % p.Tick
	switch kind {
	case OpReserve:
		left = tok - int64(n)*p.Unit
		if left < 0 {
			wait = time.Duration(CeilDiv(-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case OpCharge:
		// Takes n down to the floor at most, the rest forgiven: n is
		// clamped before it is scaled (n × Unit may pass any bound), and a
		// bucket at or below its floor (a pause's) keeps what it owes.
		most := p.chargeFloor(x)
		if k := chargeReach(tok, most, p.Unit); int64(n) > k {
			extra = max(extra, int64(n)-k)
			left = min(tok, -most)
		} else {
			left = tok - int64(n)*p.Unit
		}
		if left < p.Unit {
			wait = time.Duration(CeilDiv(p.Unit-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case OpCancel:
		// What later bookings counted on: the debt still owed at x.
		need := int64(n) * p.Unit
		back := min(need, need+tok+(x/p.Tick-now/p.Tick)*p.Refill)
		left = tok
		if back > 0 {
			left = min(tok+back, p.Capacity)
		}
	case OpPause:
		owe := int64(maxCharge)
		if x/p.Tick <= maxCharge/p.Refill {
			owe = min(x/p.Tick*p.Refill, maxCharge)
		}
		left = min(tok, -owe)
	}
	return left, wait, extra
}

// chargeFloor returns the units p's bucket may owe after a charge whose
// argument is x µs (MaxWait): max(C, what refills in x), at most
// maxCharge, where the arithmetic stays exact.
func (p *Policy) chargeFloor(x int64) int64 {
	if x/p.Tick > maxCharge/p.Refill {
		return maxCharge
	}
	return min(max(x/p.Tick*p.Refill, p.Capacity), maxCharge)
}

// chargeReach returns the whole tokens a bucket holding tok units can
// give before it owes most units (of unit each): ⌊(tok + most) / unit⌋,
// 0 when it owes that much already. The script sums it in parts, each
// below 2^53.
func chargeReach(tok, most, unit int64) int64 {
	if tok <= -most {
		return 0
	}
	return (tok + most) / unit
}

// ChargeCap returns the most tokens a charge under policies, with
// argument x µs (MaxWait), can take before it is forgiven under every
// one, plus one (so a charge of more forgives the difference; at most
// 2^53, which the script holds exactly).
func ChargeCap(policies []Policy, x int64) int64 {
	var most int64
	for i := range policies {
		p := &policies[i]
		most = max(most, chargeReach(p.Capacity, p.chargeFloor(x), p.Unit)+1)
	}
	return min(most, MaxExact)
}
