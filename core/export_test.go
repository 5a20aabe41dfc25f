package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// SetClock replaces l's clock for its circuit breakers, denial cache and
// log throttle: now returns the time since an arbitrary start.
func SetClock(l *Limiter, now func() time.Duration) {
	l.clock = func() int64 { return int64(now()) }
}

// ScriptSHA is the decision script's SHA-1 digest.
func ScriptSHA() string { return transport.TokenBuckets.Hash() }

// LimitSets is how many per-request limits l keeps the arithmetic of.
func LimitSets(l *Limiter) int {
	l.perLimit.mu.RLock()
	defer l.perLimit.mu.RUnlock()
	return len(l.perLimit.m)
}

// MaxLimitSets bounds LimitSets.
const MaxLimitSets = maxLimitSets

// StoreRunning is how many decisions s has queued or in a call.
func StoreRunning(s *RedisStore) int64 { return s.t.Running() }

// Policy, Outcome and Policies give the tests the stores' own types:
// internal/bucket's, which core does not export.
type (
	Policy  = bucket.Policy
	Outcome = bucket.Outcome
)

// Policies validates limits and returns them in the stores' form.
func Policies(limits ...NamedLimit) ([]Policy, error) { return policies(limits...) }

// Take asks s to decide as a limiter does, past the guard: n tokens of
// subject (a key as the limiter gives it) under policies, by ctx's deadline.
func (s *MemoryStore) Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpTake, Subj: subject, N: n, Policies: policies, Each: each})
}

// Peek is Take, taking nothing.
func (s *MemoryStore) Peek(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpPeek, Subj: subject, N: n, Policies: policies, Each: each})
}

// Refund gives n tokens back.
func (s *MemoryStore) Refund(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpRefund, Subj: subject, N: n, Policies: policies, Each: each})
}

// Reset makes subject's buckets full.
func (s *MemoryStore) Reset(ctx context.Context, subject string, policies []Policy) error {
	_, err := s.call(ctx, bucket.Ask{Op: bucket.OpClear, Subj: subject, Policies: policies})
	return err
}

// Take is MemoryStore.Take on Redis.
func (s *RedisStore) Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpTake, Subj: subject, N: n, Policies: policies, Each: each})
}

// Peek is MemoryStore.Peek on Redis.
func (s *RedisStore) Peek(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpPeek, Subj: subject, N: n, Policies: policies, Each: each})
}

// Refund is MemoryStore.Refund on Redis.
func (s *RedisStore) Refund(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpRefund, Subj: subject, N: n, Policies: policies, Each: each})
}

// Reset is MemoryStore.Reset on Redis.
func (s *RedisStore) Reset(ctx context.Context, subject string, policies []Policy) error {
	_, err := s.call(ctx, bucket.Ask{Op: bucket.OpClear, Subj: s.subject(subject), Policies: policies})
	return err
}

// Take is MemoryStore.Take for any of this package's stores.
func Take(ctx context.Context, s Store, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpTake, Subj: subject, N: n, Policies: policies, Each: each})
}

// Peek is MemoryStore.Peek for any of this package's stores.
func Peek(ctx context.Context, s Store, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpPeek, Subj: subject, N: n, Policies: policies, Each: each})
}

// Refund is MemoryStore.Refund for any of this package's stores.
func Refund(ctx context.Context, s Store, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return storeDo(ctx, s, bucket.Ask{Op: bucket.OpRefund, Subj: subject, N: n, Policies: policies, Each: each})
}

// Heartbeat makes l's heartbeat now, on the caller's goroutine (see
// instanceCount), and returns the count FailLocal uses after it.
func Heartbeat(l *Limiter) int {
	l.base.heartbeat()
	return Instances(l)
}

// Instances is the instance count l's FailLocal divides by; 0 for the
// other modes.
func Instances(l *Limiter) int {
	if c := l.base.fallback.count; c != nil {
		return c.get()
	}
	return 0
}
