package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// A MemoryStore's leases are a bucket.Leases on the store's clock.

// lease makes c at once: the store is in this process, and counts one
// instance, this one.
func (s *MemoryStore) lease(_ context.Context, c leaseCall) (bucket.LeaseAnswer, error) {
	switch c.op {
	case leaseAcquire:
		return s.acquireLocal(c.acquire), nil
	case leaseRelease:
		s.releaseLease(c.name, c.subj, c.id)
	case leaseRenew:
		for i, l := range c.held {
			c.renewed[i] = s.renewLease(c.name, l.subj, l.id, c.lease)
		}
	case leaseLive:
		return bucket.LeaseAnswer{Held: 1}, nil
	}
	return bucket.LeaseAnswer{}, nil
}

// acquireLocal takes a slot for req, and with req.Policies one token of
// them from this store's buckets of req.Subj, all or nothing.
func (s *MemoryStore) acquireLocal(req *bucket.LeaseAsk) bucket.LeaseAnswer {
	var decide func(op int) bool
	if req.Policies != nil {
		decide = func(op int) bool {
			req.Rate = s.table.Apply(&bucket.Ask{Op: op, Subj: req.Subj, N: 1, Policies: req.Policies, Each: req.Each})
			return req.Rate.Allowed
		}
	}
	return s.leases.Acquire(s.table.Now(), req, decide)
}

// releaseLease removes lease id, if held.
func (s *MemoryStore) releaseLease(name, subject, id string) {
	s.leases.Release(s.table.Now(), name, subject, id)
}

// renewLease renews lease id for lease from now: renewed, renewExpired
// (past its deadline: pruned now) or renewGone.
func (s *MemoryStore) renewLease(name, subject, id string, lease time.Duration) renewal {
	return s.leases.Renew(s.table.Now(), name, subject, id, lease)
}
