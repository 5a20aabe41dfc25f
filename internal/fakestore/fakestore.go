// Package fakestore makes stand-in stores for tests: a core.Store outside
// the process whose every call a test function answers (one that fails,
// stalls, records what it is asked, or answers as it likes). A Limiter
// decides through one as through Redis: by its deadline, through its
// breaker and denial cache. It cannot hold a Concurrency's leases: those
// calls fail. (How: see internal/standin.)
package fakestore

import (
	"context"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/standin"
)

// Func answers a call: a as a store gets it (a.Op is bucket.OpTake,
// OpPeek, OpRefund…, or bucket.OpClear for Limiter.Reset); ctx has the
// decision's deadline.
type Func func(ctx context.Context, a bucket.Ask) (bucket.Outcome, error)

// store is a stand-in (standin.Store): answer answers its calls, or when
// nil, check sees each and the embedded store decides those it passes.
type store struct {
	core.Store // Over's inner store; nil for New's, never called
	answer     Func
	check      func(ctx context.Context, a bucket.Ask) error
}

var _ standin.Store = (*store)(nil)

// Answer answers a (see standin.Store).
func (s *store) Answer(ctx context.Context, a bucket.Ask) (bucket.Outcome, bool, error) {
	if s.answer != nil {
		o, err := s.answer(ctx, a)
		return o, false, err
	}
	if s.check != nil {
		if err := s.check(ctx, a); err != nil {
			return bucket.Outcome{}, false, err
		}
	}
	return bucket.Outcome{}, true, nil
}

// New returns a store whose calls f answers.
func New(f Func) core.Store {
	if f == nil {
		panic("fakestore: New(nil)")
	}
	return &store{answer: f}
}

// Over returns a store that decides every call in inner (a
// *core.MemoryStore or a *core.RedisStore) but, seen from a Limiter, lies
// outside the process (a MemoryStore then decides as Redis would be
// asked); before each call, f (if not nil) sees it and may fail it with
// an error.
func Over(inner core.Store, f func(ctx context.Context, a bucket.Ask) error) core.Store {
	return &store{Store: inner, check: f}
}
