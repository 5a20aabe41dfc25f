package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// A MemoryStore's leases are a bucket.Leases on the store's clock; these
// are the store's lease calls (see storeCalls) over it.

// acquire is acquireLocal: the store is in this process.
func (s *MemoryStore) acquire(_ context.Context, _ time.Time, _ int64, _ *transport.LeaseQueues, req *bucket.LeaseAsk) (bucket.LeaseAnswer, error) {
	return s.acquireLocal(req), nil
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

// release is releaseLease: the store is in this process.
func (s *MemoryStore) release(_ context.Context, _ time.Time, _ int64, name, subject, id string) error {
	s.releaseLease(name, subject, id)
	return nil
}

// renew is renewLease for each of ls: the store is in this process.
func (s *MemoryStore) renew(_ context.Context, _ time.Time, _ int64, name string, lease time.Duration, ls []*Lease) ([]renewal, error) {
	got := make([]renewal, len(ls))
	for i, l := range ls {
		got[i] = s.renewLease(name, l.subj, l.id, lease)
	}
	return got, nil
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
