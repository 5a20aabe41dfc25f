package core

import "context"

// Peek implements Peeker: it never blocks on I/O and writes nothing.
func (s *MemoryStore) Peek(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := checkTake(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	return s.apply(opPeek, subject, n, policies, each), nil
}

// Refund implements Refunder.
func (s *MemoryStore) Refund(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := checkTake(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	return s.apply(opRefund, subject, n, policies, each), nil
}

// apply runs one operation of the script (opTake, opPeek, opRefund) with
// the same arithmetic, under subject's shard lock. Arguments are checked.
func (s *MemoryStore) apply(op int, subject string, n int, policies []Policy, each []Outcome) Outcome {
	if op == opTake {
		return s.take(subject, n, policies, each)
	}
	sh, hs, now := s.lock(subject)
	defer sh.mu.Unlock()
	tokens := make([]int64, len(policies))
	allowed := true
	for i := range policies {
		p := &policies[i]
		tokens[i] = p.Capacity
		if b := sh.lookup(sh.hash(s, hs, p.Name), p.Name, subject); b != nil {
			tokens[i] = p.refill(b.units, b.ts, now)
		}
		if tokens[i] < int64(n)*p.Unit {
			allowed = false
		}
	}
	var best Outcome
	for i := range policies {
		p := &policies[i]
		var d decision
		if op == opRefund {
			left := min(p.Capacity, tokens[i]+int64(n)*p.Unit)
			d, _ = p.decide(left+int64(n)*p.Unit, n, true, now) // leaves left
			h := sh.hash(s, hs, p.Name)
			sh.put(s, sh.lookup(h, p.Name, subject), h, p.Name, subject, left, now, d.resetAfter)
		} else {
			d, _ = p.decide(tokens[i], n, false, now)
			d.allowed = allowed
		}
		o := d.outcome(i)
		if each != nil {
			each[i] = o
		}
		if i == 0 || binds(o, best) {
			best = o
		}
	}
	return best
}
