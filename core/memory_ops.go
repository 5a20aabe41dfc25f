package core

import "github.com/sluicehq/ratelimit/internal/bucket"

// apply runs one operation of the script (bucket.OpTake, OpPeek,
// OpRefund, or a waiting one) with the same arithmetic, under subject's
// shard lock. Arguments are checked.
func (s *MemoryStore) apply(op int, subject string, n int, policies []bucket.Policy, each []bucket.Outcome) bucket.Outcome {
	if op == bucket.OpTake {
		return s.take(subject, n, policies, each)
	}
	a := bucket.Ask{Op: op, Subj: subject, N: n, Policies: policies, Each: each}
	sh, hs, now := s.lock(subject)
	defer sh.mu.Unlock()
	return sh.applyMany(s, hs, &a, now)
}
