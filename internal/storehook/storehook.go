// Package storehook is how tests outside package core stand in for a
// store outside the process: core.Store is sealed (only core's RedisStore
// and MemoryStore implement it), so a test store is a function that
// package core wraps into a core.Store. Use it through package
// internal/fakestore, which gives it its types.
package storehook

import (
	"context"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Func answers a stand-in store's call: a.Op (bucket.OpTake, OpPeek,
// OpRefund, or OpReset) for a.N tokens of a.Subj under a.Policies,
// filling a.Each when not nil; ctx has a.Deadline.
type Func func(ctx context.Context, a bucket.Ask) (bucket.Outcome, error)

// OpReset is a stand-in's Limiter.Reset call: n is 0, each nil, the
// outcome ignored.
const OpReset = 15 // no operation's: they fit in 3 bits (see bucket.WithArg)

// New is set by package core: it returns a core.Store (as any) whose
// calls f answers. A Limiter decides through it as through a RedisStore:
// by the decision's deadline, through its breaker and denial cache. Its
// calls run on goroutines of their own, so a function that blocks past
// the deadline holds no caller.
var New func(f Func) any

// Do is set by package core: it asks s, a core.Store (as any), to do a
// (OpReset included; a.Subj a key as a Limiter is given it) as a Limiter
// would past its guard, by ctx's deadline: a RedisStore keys the subject
// by its digest, a MemoryStore as it is.
var Do func(ctx context.Context, s any, a bucket.Ask) (bucket.Outcome, error)
