package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// storeCalls is what a Limiter asks of its store: the one capability
// interface the stores implement, resolved once in New (RedisStore and
// MemoryStore implement it; any other Store is wrapped in a foreignStore),
// so that no call site asks what the store is.
type storeCalls interface {
	// clear makes subject's buckets under policies full again.
	clear(ctx context.Context, subject string, policies []Policy) error
	// call takes, peeks or refunds (op) by deadline, admitting the
	// decision only while fewer than bound run in the store (else
	// ErrOverloaded). ctx gives values; its cancellation is not watched.
	call(ctx context.Context, deadline time.Time, op int, subject string, n int, policies []Policy, each []Outcome, bound int64) (Outcome, error)
	// cannot returns why the store cannot run op, nil when it can.
	cannot(op int) error
	// remote reports a store outside this process: its calls are bounded
	// by Timeout and guarded by breakers, and its denials are cached. An
	// in-process store answers at once and never fails a checked call.
	remote() bool
	// subject is key as the store keeps it: a digest when key is long
	// (bounded memory) or could spell another key's digest or break a
	// Cluster hash tag.
	subject(key string) string
	// why returns the store's own account of its failures: a fresh dial
	// error, and its last call's error (nil when it succeeded); told is
	// false when the store says nothing of either.
	why() (dialErr, last error, told bool)
	// nodes returns what names the node deciding a subject, nil for a
	// store of one node (the Limiter keeps a breaker per node).
	nodes() func(subject string) string
	// policyNames returns the book of the store's limiters' policy names,
	// nil when the store keeps none.
	policyNames() *nameBook
	// memory returns the store when it is a MemoryStore, else nil: the
	// in-process store, which its limiters call past the guard.
	memory() *MemoryStore

	// A Concurrency's leases (cannot(opLease) says whether the store
	// holds any), each call by deadline and within bound, as call.

	// acquire takes a slot for req (see leaseRequest).
	acquire(ctx context.Context, deadline time.Time, bound int64, req *leaseRequest) (leaseAnswer, error)
	// release removes lease id of subject's set under name, if held.
	release(ctx context.Context, deadline time.Time, bound int64, name, subject, id string) error
	// renew renews the leases ls (at most maxRenewLeases) of one
	// Concurrency, under name, for lease: renewed, gone or expired per
	// lease; unknown for every lease of a call that failed.
	renew(ctx context.Context, deadline time.Time, bound int64, name string, lease time.Duration, ls []*Lease) ([]renewal, error)
}

// resolveStore returns s's capability, once, in New.
func resolveStore(s Store) (storeCalls, error) {
	switch c := s.(type) {
	case nil:
		return nil, ErrNoStore
	case *RedisStore:
		if c.nilClient() {
			return nil, fmt.Errorf("%w: the RedisStore's client is a nil %T", ErrNoStore, c.client)
		}
		return c, nil
	case storeCalls:
		return c, nil
	}
	return newForeignStore(s), nil
}

func (s *RedisStore) call(ctx context.Context, deadline time.Time, op int, subject string, n int, policies []Policy, each []Outcome, bound int64) (Outcome, error) {
	return s.do(ctx, deadline, op, subject, n, policies, each, bound)
}
func (s *RedisStore) cannot(int) error                      { return nil }
func (s *RedisStore) remote() bool                          { return true }
func (s *RedisStore) subject(key string) string             { return hashSubject(key) }
func (s *RedisStore) why() (dialErr, last error, told bool) { return s.dialError(), s.cause(), true }
func (s *RedisStore) policyNames() *nameBook                { return &s.names }

func (s *RedisStore) memory() *MemoryStore { return nil }

func (s *RedisStore) nodes() func(string) string {
	if s.split {
		return s.node
	}
	return nil
}

func (s *MemoryStore) clear(ctx context.Context, subject string, policies []Policy) error {
	return s.Reset(ctx, subject, policies)
}

func (s *MemoryStore) call(_ context.Context, _ time.Time, op int, subject string, n int, policies []Policy, each []Outcome, _ int64) (Outcome, error) {
	return s.apply(op, subject, n, policies, each), nil
}
func (s *MemoryStore) cannot(int) error                   { return nil }
func (s *MemoryStore) remote() bool                       { return false }
func (s *MemoryStore) why() (dialErr, last error, _ bool) { return nil, nil, true }
func (s *MemoryStore) nodes() func(string) string         { return nil }
func (s *MemoryStore) policyNames() *nameBook             { return &s.names }
func (s *MemoryStore) memory() *MemoryStore               { return s }

// subject digests only a long key, and a key starting with '~' (no key
// may spell another's digest): a memory store takes any byte.
func (s *MemoryStore) subject(key string) string {
	if len(key) <= maxRawSubject && key[0] != '~' {
		return key
	}
	return hashSubject(key)
}

// foreignStore is a Store of another package, one per Limiter: it may not
// honour its context's deadline, peek, refund or reset, and it says
// nothing of why it fails. Its calls run on goroutines of their own,
// counted until they return.
type foreignStore struct {
	Store
	peek     Peeker   // nil: cannot peek
	refund   Refunder // nil: cannot refund
	inflight atomic.Int64
}

func newForeignStore(s Store) *foreignStore {
	f := &foreignStore{Store: s}
	f.peek, _ = s.(Peeker)
	f.refund, _ = s.(Refunder)
	return f
}

// call returns by deadline whatever the store does; the store's context
// has that deadline. The goroutine fills outcomes of its own, never each
// after call returned.
func (f *foreignStore) call(ctx context.Context, deadline time.Time, op int, subject string, n int, policies []Policy, each []Outcome, bound int64) (Outcome, error) {
	type answer struct {
		o    Outcome
		err  error
		each []Outcome
	}
	if !admit(&f.inflight, bound) {
		return Outcome{}, ErrOverloaded
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	done := make(chan answer, 1)
	go func() {
		defer f.inflight.Add(-1) // counted until the store returns, whenever that is
		var mine []Outcome
		if each != nil {
			mine = make([]Outcome, len(each))
		}
		o, err := f.run(ctx, op, subject, n, policies, mine)
		done <- answer{o, err, mine}
	}()
	select {
	case a := <-done:
		copy(each, a.each)
		return a.o, a.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

func (f *foreignStore) run(ctx context.Context, op int, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	switch op {
	case opPeek:
		return f.peek.Peek(ctx, subject, n, policies, each)
	case opRefund:
		return f.refund.Refund(ctx, subject, n, policies, each)
	}
	return f.Take(ctx, subject, n, policies, each)
}

func (f *foreignStore) cannot(op int) error {
	switch {
	case op == opLease:
		return fmt.Errorf("%w: a %T cannot hold leases; use a RedisStore or MemoryStore", ErrInvalidConfig, f.Store)
	case op == opPeek && f.peek == nil:
		return unsupported(f.Store, "peek")
	case op == opRefund && f.refund == nil:
		return unsupported(f.Store, "refund")
	}
	return nil
}

func (f *foreignStore) clear(ctx context.Context, subject string, policies []Policy) error {
	r, ok := f.Store.(Resetter)
	if !ok {
		return unsupported(f.Store, "reset")
	}
	return r.Reset(ctx, subject, policies)
}

func (*foreignStore) remote() bool                          { return true }
func (*foreignStore) subject(key string) string             { return hashSubject(key) }
func (*foreignStore) why() (dialErr, last error, told bool) { return nil, nil, false }
func (*foreignStore) nodes() func(string) string            { return nil }
func (*foreignStore) policyNames() *nameBook                { return nil }
func (*foreignStore) memory() *MemoryStore                  { return nil }

func (*foreignStore) acquire(context.Context, time.Time, int64, *leaseRequest) (leaseAnswer, error) {
	return leaseAnswer{}, ErrInvalidConfig
}
func (*foreignStore) release(context.Context, time.Time, int64, string, string, string) error {
	return ErrInvalidConfig
}
func (*foreignStore) renew(_ context.Context, _ time.Time, _ int64, _ string, _ time.Duration, ls []*Lease) ([]renewal, error) {
	return make([]renewal, len(ls)), ErrInvalidConfig
}

// unsupported is the error for what store s cannot do.
func unsupported(s Store, what string) error {
	return fmt.Errorf("%w: store %T cannot %s", ErrInvalidConfig, s, what)
}
