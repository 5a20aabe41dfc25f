package core

import "time"

// applyWait runs a waiting operation (a.op: opReserve, opCharge,
// opCancel, opPause, with its argument x) for every policy of a.subj (hs
// its hash) at once, with the script's arithmetic (see waiting in
// lua.go). The shard is locked.
func (sh *memShard) applyWait(s *MemoryStore, hs uint64, a *ask, now int64) Outcome {
	kind, x := splitOp(a.op)
	n, policies, each := a.n, a.policies, a.each
	var small [4]memRead
	reads := small[:0]
	if len(policies) > len(small) {
		reads = make([]memRead, 0, len(policies))
	}
	reads, _, now = sh.readAll(s, hs, a, reads, now)
	allowed, write := true, true
	var extra int64
	switch kind {
	case opReserve:
		// Booked when its n tokens exist under every policy within x µs.
		most := untilAll(policies, reads, n, now)
		if most > x {
			allowed, write = false, false
		} else {
			extra = now + most
		}
	case opCancel:
		if now >= x {
			allowed, write = false, false
		}
	}
	var best Outcome
	for i := range policies {
		p := &policies[i]
		r := &reads[i]
		var d decision
		switch {
		case write:
			var left int64
			var wait time.Duration
			left, wait, extra = p.waiting(kind, x, n, r.tokens, extra, now)
			d, _ = p.decide(left, 0, true, now) // the bucket as left
			d.retryAfter = wait
			sh.put(s, r.hash, &r.key, a.subj, left, now)
		case r.own < 0:
			d, _ = p.decide(r.tokens, n, false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, n, now)
		}
		d.allowed = allowed
		o := d.outcome(i)
		if each != nil {
			each[i] = o
		}
		if i == 0 || binds(o, best) {
			best = o
		}
	}
	best.extra = extra
	return best
}

// untilAll returns the µs from now until n tokens exist under every
// policy, its bucket read as reads[i]: 0 when they all hold them.
func untilAll(policies []Policy, reads []memRead, n int, now int64) int64 {
	var most int64
	for i := range policies {
		p := &policies[i]
		if short := int64(n)*p.Unit - reads[i].tokens; short > 0 {
			most = max(most, ceilDiv(short, p.Refill)*p.Tick-now%p.Tick)
		}
	}
	return most
}

// waiting is the arithmetic of a waiting operation (kind, with argument
// x) on p's bucket, which holds tok units, for n tokens, at now: the units
// left, the wait (a reservation's until its tokens exist, a charge's until
// a token does) and extra, raised to this policy's (a charge's tokens
// forgiven). It is the script's waiting, line for line.
func (p *Policy) waiting(kind int, x int64, n int, tok, extra, now int64) (left int64, wait time.Duration, _ int64) {
	phase := now % p.Tick
	switch kind {
	case opReserve:
		left = tok - int64(n)*p.Unit
		if left < 0 {
			wait = time.Duration(ceilDiv(-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case opCharge:
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
			wait = time.Duration(ceilDiv(p.Unit-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case opCancel:
		// What later bookings counted on: the debt still owed at x.
		need := int64(n) * p.Unit
		back := min(need, need+tok+(x/p.Tick-now/p.Tick)*p.Refill)
		left = tok
		if back > 0 {
			left = min(tok+back, p.Capacity)
		}
	case opPause:
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
