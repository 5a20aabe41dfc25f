package core

import (
	"fmt"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// fallback is what FailMode decides when the store cannot, for every kind
// of limiter: allow (FailOpen), deny (FailClosed, until the breaker's next
// probe), or decide in this process — in buckets holding an instance's
// share of the limit, or among leases holding an instance's share of the
// slots (FailLocal).
type fallback struct {
	mode     FailMode
	cooldown time.Duration  // FailClosed's RetryAfter while the breaker is closed (BreakerCooldown)
	local    *MemoryStore   // FailLocal's buckets and leases; nil for the other modes
	count    *instanceCount // FailLocal's instances; nil for the other modes
}

// defaultLocalMaxKeys bounds FailLocal's buckets unless LocalMaxKeys says.
const defaultLocalMaxKeys = 1 << 16

func newFallback(mode FailMode, maxKeys, instances int) fallback {
	f := fallback{mode: mode}
	if mode == FailLocal {
		f.local = NewMemoryStore(WithMaxKeys(orDefault(maxKeys, defaultLocalMaxKeys)))
		f.count = newInstanceCount(instances)
	}
	return f
}

// closedRetry is FailClosed's RetryAfter: until br, the breaker of the
// store's node, lets a call through again (the cooldown when closed).
func (f *fallback) closedRetry(br *breaker, now int64) time.Duration {
	if retry := br.retryIn(now); retry > 0 {
		return retry
	}
	return f.cooldown
}

// decide answers op for key under set while the store cannot; br is the
// breaker of the store's node deciding key, now the owner's clock.
func (f *fallback) decide(br *breaker, now int64, op int, key string, n int, set *policySet) Result {
	name := set.policies[0].Name
	switch {
	case f.mode == FailOpen || (!admits(op) && f.mode == FailClosed):
		return Result{Allowed: true, Limit: set.limits[0], Name: name, Degraded: true}
	case f.mode == FailClosed:
		return Result{Limit: set.limits[0], Name: name, RetryAfter: f.closedRetry(br, now), Degraded: true}
	}
	local := set.share(f.count)
	if n > local.minCap {
		// More than an instance's share could ever hold: deny, take
		// nothing; a refund of it is capped at the share anyway.
		n = local.minCap
		if admits(op) {
			return Result{Limit: local.limits[0], Name: name, RetryAfter: local.limits[0].Window(), Degraded: true, Fallback: true}
		}
	}
	var each []bucket.Outcome
	if len(local.policies) > 1 {
		each = make([]bucket.Outcome, len(local.policies))
	}
	r := resultOf(f.local.table.Apply(&bucket.Ask{Op: op, Subj: key, N: n, Policies: local.policies, Each: each}), each, local)
	r.Degraded, r.Fallback = true, true
	return r
}

// acquire answers an acquire of a slot of req while the store cannot:
// FailOpen admits holding nothing (held heldNowhere), FailClosed refuses,
// FailLocal takes one of req.Max slots in this process (heldLocally);
// req is the fallback's own (see Concurrency.degrade).
func (f *fallback) acquire(br *breaker, now int64, req *bucket.LeaseAsk) (a bucket.LeaseAnswer, held int8) {
	switch f.mode {
	case FailOpen:
		return bucket.LeaseAnswer{Allowed: true}, heldNowhere
	case FailClosed:
		return bucket.LeaseAnswer{RetryAfter: f.closedRetry(br, now)}, heldNowhere
	}
	return f.local.acquireLocal(req), heldLocally
}

// localLimit is lim shared by instances: the same rate over instances times
// the period (exact, no rounding), and the burst divided, at least 1.
func localLimit(lim Limit, instances int) (Limit, error) {
	if lim.Period > time.Duration(1<<62)/time.Duration(instances) {
		return Limit{}, fmt.Errorf("%w: Period × Instances overflows", ErrInvalidConfig)
	}
	ll := Limit{Rate: lim.Rate, Period: lim.Period * time.Duration(instances), Burst: max(1, lim.Capacity()/instances)}
	if err := ll.validate(); err != nil {
		return Limit{}, fmt.Errorf("FailLocal limit (Limit / Instances): %w", err)
	}
	return ll, nil
}
