package core

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/standin"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// storeCalls is what every limiter asks of its store: Store's method set,
// unexported, so that the stores are this package's own (RedisStore,
// MemoryStore, and the stand-ins tests make through internal/standin),
// and no call site asks what the store is.
type storeCalls interface {
	// call decides a (see bucket.Ask; OpClear makes a.Subj's buckets
	// under a.Policies full again). ctx gives values; its cancellation is
	// not watched.
	call(ctx context.Context, a bucket.Ask) (bucket.Outcome, error)
	// lease makes c, one of a Concurrency's lease calls (see leaseCall),
	// as call makes a decision; an acquire's answer is its LeaseAnswer.
	lease(ctx context.Context, c leaseCall) (bucket.LeaseAnswer, error)
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
	// breakers returns the store's circuit breakers, one per node, which
	// every limiter on it shares; nil for a store in this process.
	breakers() *nodeBreakers
	// unit names what one decision across subjects (bucket.Ask.Across)
	// may span in one call: the subjects of one unit go together.
	unit(subject string) string
	// policyNames returns the book of the store's limiters' policy names,
	// nil when the store keeps none.
	policyNames() *nameBook
	// take1 decides a take of n tokens of key (as a limiter gives it)
	// under p, one policy, arguments checked, at once and in place when
	// the store is in this process (ok); a store outside it says !ok,
	// and the take goes through the guard. A Limiter's hot path
	// (BENCHMARKS.md, "Tricks kept").
	take1(key string, n int, p *bucket.Policy) (d bucket.Decision, ok bool)
}

// leaseCall is one lease call of a Concurrency to its store (or the
// guard's heartbeat), as a bucket.Ask is one decision: op says which,
// and deadline and bound bound it as an Ask's Deadline and Bound do.
// The other fields are the op's: each says whose.
type leaseCall struct {
	op       leaseOp
	deadline time.Time // zero: none (a store in this process)
	bound    int64     // the guard's MaxInFlight; 0: none

	acquire *bucket.LeaseAsk       // leaseAcquire: the slot asked; the store fills its Each and Rate
	queues  *transport.LeaseQueues // leaseAcquire: a Concurrency's, to batch on Redis (nil: none)
	name    string                 // the others: the Concurrency's name (leaseLive: the policy's)
	subj    string                 // leaseRelease: the lease's subject, as the store keys it
	id      string                 // leaseRelease: the lease's id
	lease   time.Duration          // leaseRenew: the Lease renewed for; leaseLive: the set's ttl
	held    []*Lease               // leaseRenew: the leases (at most maxRenewLeases)
	renewed []renewal              // leaseRenew: filled, what became of each of held
}

// The lease calls.
type leaseOp int8

const (
	// leaseAcquire takes a slot (see bucket.LeaseAsk).
	leaseAcquire leaseOp = iota + 1
	// leaseRelease removes lease id of subj's set under name, if held.
	leaseRelease
	// leaseRenew renews held, all of one Concurrency, under name, for
	// lease: renewed, gone or expired per lease; unknown for every lease
	// of a call that failed.
	leaseRenew
	// leaseLive stamps the store (an app instance) in the live set of the
	// instances deciding under policy name, drops those not stamped
	// within lease, and counts those left in the answer's Held (see
	// instanceCount).
	leaseLive
)

// standins holds the hookStore of every stand-in store resolved (tests only).
var standins sync.Map

// resolveStore returns s's calls, once, in New: the one place that asks
// what the store is.
func resolveStore(s Store) (storeCalls, error) {
	switch c := s.(type) {
	case nil:
		return nil, ErrNoStore
	case *RedisStore:
		if c == nil || c.t == nil || transport.NilClient(c.t.Client()) {
			return nil, fmt.Errorf("%w: a nil RedisStore, or one whose client is nil", ErrNoStore)
		}
	case *MemoryStore:
		if c == nil {
			return nil, fmt.Errorf("%w: a nil MemoryStore", ErrNoStore)
		}
	case standin.Store:
		// One hookStore per stand-in, so that limiters given the same
		// stand-in share one store, as AllowAll requires.
		h, _ := standins.LoadOrStore(c, &hookStore{s: c, inner: s})
		return h.(*hookStore), nil
	default:
		return nil, fmt.Errorf("%w: %T is not a store of NewRedisStore or NewMemoryStore", ErrNoStore, s)
	}
	return s, nil
}
