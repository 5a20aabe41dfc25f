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
	// clear makes subject's buckets under policies full again.
	clear(ctx context.Context, subject string, policies []bucket.Policy) error
	// call decides a (see bucket.Ask). ctx gives values; its cancellation is
	// not watched.
	call(ctx context.Context, a bucket.Ask) (bucket.Outcome, error)
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

	// A Concurrency's leases, each call by deadline and within bound, as
	// call.

	// acquire takes a slot for req (see bucket.LeaseAsk); a RedisStore
	// batches the acquires of one set through qs (a Concurrency's; nil:
	// none), which other stores ignore.
	acquire(ctx context.Context, deadline time.Time, bound int64, qs *transport.LeaseQueues, req *bucket.LeaseAsk) (bucket.LeaseAnswer, error)
	// release removes lease id of subject's set under name, if held.
	release(ctx context.Context, deadline time.Time, bound int64, name, subject, id string) error
	// live stamps the store (an app instance) in the live set of the
	// instances deciding under policy name, by deadline and within bound,
	// drops those not stamped within ttl, and returns how many remain
	// (see instanceCount).
	live(ctx context.Context, deadline time.Time, bound int64, name string, ttl time.Duration) (int, error)
	// renew renews the leases ls (at most maxRenewLeases) of one
	// Concurrency, under name, for lease: renewed, gone or expired per
	// lease; unknown for every lease of a call that failed.
	renew(ctx context.Context, deadline time.Time, bound int64, name string, lease time.Duration, ls []*Lease) ([]renewal, error)
}

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
