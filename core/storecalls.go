package core

import (
	"context"
	"fmt"
)

// storeCalls is what a Limiter asks of a store outside this process: the
// one capability interface the stores implement, resolved once in New
// (RedisStore implements it; any other Store is wrapped in foreignStore),
// so no call site asks what the store is.
type storeCalls interface {
	// call takes, peeks or refunds (op), admitting the decision only while
	// fewer than bound run in the store (else ErrOverloaded).
	call(ctx context.Context, op int, subject string, n int, policies []Policy, each []Outcome, bound int64) (Outcome, error)
	// supports reports whether the store can run op at all.
	supports(op int) bool
	// bounded reports a store that returns by its context's deadline.
	bounded() bool
	// why returns the store's own account of its failures: a fresh dial
	// error, and the last call's error (nil when it succeeded).
	why() (dialErr, last error)
}

func (s *RedisStore) call(ctx context.Context, op int, subject string, n int, policies []Policy, each []Outcome, bound int64) (Outcome, error) {
	return s.do(ctx, op, subject, n, policies, each, bound)
}
func (s *RedisStore) supports(int) bool          { return true }
func (s *RedisStore) bounded() bool              { return true }
func (s *RedisStore) why() (dialErr, last error) { return s.dialError(), s.cause() }

// foreignStore is a Store of another package: it may not honour its
// context's deadline, peek or refund; it says nothing of why it fails.
// The Limiter bounds its calls itself (callBounded).
type foreignStore struct {
	Store
	peek   Peeker   // nil: cannot peek
	refund Refunder // nil: cannot refund
}

func newForeignStore(s Store) foreignStore {
	f := foreignStore{Store: s}
	f.peek, _ = s.(Peeker)
	f.refund, _ = s.(Refunder)
	return f
}

func (f foreignStore) call(ctx context.Context, op int, subject string, n int, policies []Policy, each []Outcome, _ int64) (Outcome, error) {
	switch op {
	case opPeek:
		return f.peek.Peek(ctx, subject, n, policies, each)
	case opRefund:
		return f.refund.Refund(ctx, subject, n, policies, each)
	}
	return f.Take(ctx, subject, n, policies, each)
}

func (f foreignStore) supports(op int) bool {
	return (op != opPeek || f.peek != nil) && (op != opRefund || f.refund != nil)
}
func (foreignStore) bounded() bool              { return false }
func (foreignStore) why() (dialErr, last error) { return nil, nil }

// resolveCalls returns s's capability, once, in New.
func resolveCalls(s Store) storeCalls {
	if c, ok := s.(storeCalls); ok {
		return c
	}
	return newForeignStore(s)
}

// unsupported is the error for an op the store cannot run.
func unsupported(s Store, op int) error {
	what := "peek"
	if op == opRefund {
		what = "refund"
	}
	return fmt.Errorf("%w: store %T cannot %s", ErrInvalidConfig, s, what)
}
