// Package fakestore makes stand-in stores for tests: a core.Store outside
// the process whose every call a test function answers (one that fails,
// stalls, records what it is asked, or answers as it likes). A Limiter
// decides through one as through Redis: by its deadline, through its
// breaker and denial cache. It cannot hold a Concurrency's leases: those
// calls fail.
package fakestore

import (
	"context"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/storehook"
)

// Op is what a call asks of the store.
type Op int

// The operations, with core's numbers.
const (
	Take   Op = 1
	Peek   Op = 2
	Refund Op = 3
	Reset  Op = 5 // Limiter.Reset: n is 0, each nil, the outcome ignored
)

// Call is one store call: op for n tokens of subject under policies,
// filling each (when not nil) with every policy's outcome. ctx has the
// decision's deadline.
type Call struct {
	Op       Op
	Subject  string
	N        int
	Policies []core.Policy
	Each     []core.Outcome
}

// Func answers a call.
type Func func(ctx context.Context, c Call) (core.Outcome, error)

// New returns a store whose calls f answers.
func New(f Func) core.Store {
	return storehook.New(func(ctx context.Context, op int, subject string, n int, policies []core.Policy, each []core.Outcome) (core.Outcome, error) {
		return f(ctx, Call{Op: Op(op), Subject: subject, N: n, Policies: policies, Each: each})
	}).(core.Store)
}

// Inner is a store deciding a stand-in's calls: a *core.MemoryStore or a
// *core.RedisStore.
type Inner interface {
	Take(ctx context.Context, subject string, n int, policies []core.Policy, each []core.Outcome) (core.Outcome, error)
	Peek(ctx context.Context, subject string, n int, policies []core.Policy, each []core.Outcome) (core.Outcome, error)
	Refund(ctx context.Context, subject string, n int, policies []core.Policy, each []core.Outcome) (core.Outcome, error)
	Reset(ctx context.Context, subject string, policies []core.Policy) error
}

// Over returns a store that decides every call in inner but, seen from a
// Limiter, lies outside the process (a MemoryStore then decides as Redis
// would be asked); before each call, f (if not nil) sees it and may fail
// it with an error.
func Over(inner Inner, f func(ctx context.Context, c Call) error) core.Store {
	return New(func(ctx context.Context, c Call) (core.Outcome, error) {
		if f != nil {
			if err := f(ctx, c); err != nil {
				return core.Outcome{}, err
			}
		}
		switch c.Op {
		case Peek:
			return inner.Peek(ctx, c.Subject, c.N, c.Policies, c.Each)
		case Refund:
			return inner.Refund(ctx, c.Subject, c.N, c.Policies, c.Each)
		case Reset:
			return core.Outcome{}, inner.Reset(ctx, c.Subject, c.Policies)
		}
		return inner.Take(ctx, c.Subject, c.N, c.Policies, c.Each)
	})
}
