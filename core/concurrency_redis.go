package core

import (
	"context"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// lease makes c through the transport, by c.deadline and within c.bound
// as decisions are (see transport.Store.Acquire, Release, Renew, Live):
// the acquires of one key batch themselves through c.queues.
func (s *RedisStore) lease(ctx context.Context, c leaseCall) (a bucket.LeaseAnswer, err error) {
	switch c.op {
	case leaseAcquire:
		a, err = s.t.Acquire(ctx, c.deadline, c.bound, c.queues, c.acquire)
	case leaseRelease:
		err = s.t.Release(ctx, c.deadline, c.bound, c.name, c.subj, c.id)
	case leaseRenew:
		ids := make([]transport.LeaseID, len(c.held))
		for i, l := range c.held {
			ids[i] = transport.LeaseID{Subj: l.subj, ID: l.id}
		}
		var got []renewal
		got, err = s.t.Renew(ctx, c.deadline, c.bound, c.name, c.lease, ids)
		copy(c.renewed, got)
	case leaseLive:
		a.Held, err = s.t.Live(ctx, c.deadline, c.bound, c.name, c.lease)
	}
	return a, storeErr(err)
}
