package core

import "time"

// applyWait runs a waiting operation (opReserve, opCharge, opCancel,
// opPause, with its argument x) for every policy of subject at once, with
// the script's arithmetic (see waiting in lua.go). The shard is locked.
func (sh *memShard) applyWait(s *MemoryStore, hs uint64, subject string, kind int, x int64, n int, policies []Policy, each []Outcome, now int64) Outcome {
	var small [4]memRead
	reads := small[:0]
	if len(policies) > len(small) {
		reads = make([]memRead, 0, len(policies))
	}
	reads, _, now = sh.readAll(s, hs, subject, n, policies, reads, now)
	allowed, write := true, true
	var extra int64
	switch kind {
	case opReserve:
		// Booked when its n tokens exist under every policy within x µs.
		var most int64
		for i := range policies {
			p := &policies[i]
			if short := int64(n)*p.Unit - reads[i].tokens; short > 0 {
				most = max(most, ceilDiv(short, p.Refill)*p.Tick-now%p.Tick)
			}
		}
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
			d, _ = p.decide(left+int64(n)*p.Unit, n, true, now) // takes n: leaves left
			d.retryAfter = wait
			sh.put(s, sh.lookup(r.hash, r.key.name, subject), r.hash, &r.key, subject, left, now)
		case r.own < 0:
			d, _ = p.decide(r.tokens, n, false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, n, false, now)
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

// waiting is the arithmetic of a waiting operation (kind, with argument
// x) on p's bucket, which holds tok units, for n tokens, at now: the units
// left, the wait (a reservation's until its tokens exist, a charge's until
// a token does) and extra, raised to this policy's (a charge's tokens
// forgiven). It is the script's waiting, line for line.
func (p *Policy) waiting(kind int, x int64, n int, tok, extra, now int64) (left int64, wait time.Duration, _ int64) {
	need, phase := int64(n)*p.Unit, now%p.Tick
	left = tok - need
	switch kind {
	case opReserve:
		if left < 0 {
			wait = time.Duration(ceilDiv(-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case opCharge:
		most := min(max(x/p.Tick*p.Refill, p.Capacity), maxCharge)
		if x/p.Tick > maxCharge/p.Refill {
			most = maxCharge
		}
		if left < -most {
			extra = max(extra, ceilDiv(-most-left, p.Unit))
			left = -most
		}
		if left < p.Unit {
			wait = time.Duration(ceilDiv(p.Unit-left, p.Refill)*p.Tick-phase) * time.Microsecond
		}
	case opCancel:
		// What later bookings counted on: the debt still owed at x.
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
