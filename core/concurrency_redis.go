package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// A RedisStore's lease calls (see storeCalls) are the transport's (see
// transport.Store.Acquire): these translate a Concurrency's requests.

// acquire takes a slot for req by deadline, bounded as decisions are;
// the acquires of one key batch themselves through qs (see
// transport.Store.Acquire).
func (s *RedisStore) acquire(ctx context.Context, deadline time.Time, bound int64, qs *transport.LeaseQueues, req *bucket.LeaseAsk) (bucket.LeaseAnswer, error) {
	a, err := s.t.Acquire(ctx, deadline, bound, qs, req)
	return a, storeErr(err)
}

// release removes lease id from its set, if there, by deadline.
func (s *RedisStore) release(ctx context.Context, deadline time.Time, bound int64, name, subj, id string) error {
	return storeErr(s.t.Release(ctx, deadline, bound, name, subj, id))
}

// renew renews ls (at most maxRenewLeases: one renewal chunk) by
// deadline, in one bounded call.
func (s *RedisStore) renew(ctx context.Context, deadline time.Time, bound int64, name string, lease time.Duration, ls []*Lease) ([]renewal, error) {
	ids := make([]transport.LeaseID, len(ls))
	for i, l := range ls {
		ids[i] = transport.LeaseID{Subj: l.subj, ID: l.id}
	}
	got, err := s.t.Renew(ctx, deadline, bound, name, lease, ids)
	return got, storeErr(err)
}
