package bucket

import "time"

// applyWait runs a waiting operation (a.Op: OpReserve, OpCharge,
// OpCancel, OpPause, with its argument x) for every policy of a.Subj (hs
// its hash) at once, with the script's arithmetic (the Redis script's
// waiting function; here Policy.waiting). The shard is locked.
func (sh *memShard) applyWait(s *Table, hs uint64, a *Ask, now int64) Outcome {
	kind, x := SplitOp(a.Op)
	n, policies, each := a.N, a.Policies, a.Each
	var small [4]memRead
	reads := small[:0]
	if len(policies) > len(small) {
		reads = make([]memRead, 0, len(policies))
	}
	reads, _, now = sh.readAll(s, hs, a, reads, now)
	allowed, write := true, true
	var extra int64
	switch kind {
	case OpReserve:
		// Booked when its n tokens exist under every policy within x µs.
		most := untilAll(policies, reads, n, now)
		if most > x {
			allowed, write = false, false
		} else {
			extra = now + most
		}
	case OpCancel:
		if now >= x {
			allowed, write = false, false
		}
	}
	var best Outcome
	for i := range policies {
		p := &policies[i]
		r := &reads[i]
		var d Decision
		switch {
		case write:
			var left int64
			var wait time.Duration
			left, wait, extra = p.waiting(kind, x, n, r.tokens, extra, now)
			d, _ = p.decide(left, 0, true, now) // the bucket as left
			d.RetryAfter = wait
			sh.put(s, r.hash, &r.key, a.Subj, left, now)
		case r.own < 0:
			d, _ = p.decide(r.tokens, n, false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, n, now)
		}
		d.Allowed = allowed
		o := d.Outcome(i)
		if each != nil {
			each[i] = o
		}
		if i == 0 || Binds(o, best) {
			best = o
		}
	}
	best.Extra = extra
	return best
}

// untilAll returns the µs from now until n tokens exist under every
// policy, its bucket read as reads[i]: 0 when they all hold them.
func untilAll(policies []Policy, reads []memRead, n int, now int64) int64 {
	var most int64
	for i := range policies {
		p := &policies[i]
		if short := int64(n)*p.Unit - reads[i].tokens; short > 0 {
			most = max(most, CeilDiv(short, p.Refill)*p.Tick-now%p.Tick)
		}
	}
	return most
}
