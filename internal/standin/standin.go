// Package standin is how a test stands in for a store outside the
// process. core.Store is sealed (only core's RedisStore and MemoryStore
// implement it), so a stand-in is a struct that embeds a core.Store (to
// be one) and has an Answer method (to be a Store of this package): core
// finds it behind Config.Store, once, in New, and sends it every call.
// Use it through package internal/fakestore, which gives it its types.
package standin

import (
	"context"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Store is a test's stand-in store. A Limiter decides through it as
// through a RedisStore: by the decision's deadline, through its breaker
// and denial cache. Its calls run on goroutines of their own, so an
// Answer that blocks past the deadline holds no caller.
type Store interface {
	// Answer answers a: a.Op (bucket.OpTake, OpPeek, OpRefund…, or OpClear:
	// Limiter.Reset's, a.N 0, a.Each nil, the outcome ignored)
	// for a.N tokens of a.Subj under a.Policies, filling a.Each when not
	// nil; ctx has a.Deadline. pass asks the core.Store the stand-in embeds
	// to decide a instead, as a Limiter would past its guard (a.Subj keyed
	// as that store keys a limiter's key).
	Answer(ctx context.Context, a bucket.Ask) (o bucket.Outcome, pass bool, err error)
}
