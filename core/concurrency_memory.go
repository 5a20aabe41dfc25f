package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// A MemoryStore's leases are a bucket.Leases on the store's clock; these
// are the store's lease calls (see storeCalls) over it.

// leaseRequest is one acquire of a slot: of subj's set under name (subj
// as the store keys it), for lease id, held at most max at once and each
// for lease; with policies (a Concurrency's Rate), one token of them too,
// all or nothing. The store fills each (every policy's outcome, when not
// nil) and rate (the binding one). A RedisStore batches the acquires of
// one set through queues (see transport.LeaseQueues), when not nil.
type leaseRequest struct {
	name     string
	subj     string
	id       string
	max      int
	localMax int // FailLocal's share of max
	lease    time.Duration
	timeout  time.Duration // bounds the call that takes back a lost acquire
	policies []bucket.Policy
	each     []bucket.Outcome
	rate     bucket.Outcome
	queues   *transport.LeaseQueues
}

// acquire is acquireLocal: the store is in this process.
func (s *MemoryStore) acquire(_ context.Context, _ time.Time, _ int64, req *leaseRequest) (bucket.LeaseAnswer, error) {
	return s.acquireLocal(req), nil
}

// acquireLocal takes a slot for req, and with req.policies one token of
// them from this store's buckets of req.subj, all or nothing.
func (s *MemoryStore) acquireLocal(req *leaseRequest) bucket.LeaseAnswer {
	var decide func(op int) bool
	if req.policies != nil {
		decide = func(op int) bool {
			req.rate = s.table.Apply(&bucket.Ask{Op: op, Subj: req.subj, N: 1, Policies: req.policies, Each: req.each})
			return req.rate.Allowed
		}
	}
	return s.leases.Acquire(s.table.Now(), bucket.LeaseAsk{Name: req.name, Subject: req.subj, ID: req.id, Max: req.max, Lease: req.lease}, decide)
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
