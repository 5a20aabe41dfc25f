package core

import "context"

// Peek answers as Take would, taking nothing: it never blocks on I/O and writes nothing.
func (s *MemoryStore) Peek(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := checkTake(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	return s.apply(opPeek, subject, n, policies, each), nil
}

// Refund gives n tokens back to subject under every policy, each capped at its capacity, and answers with the buckets after it.
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
	a := ask{op: op, subj: subject, n: n, policies: policies, each: each}
	sh, hs, now := s.lock(subject)
	defer sh.mu.Unlock()
	return sh.applyMany(s, hs, &a, now)
}
