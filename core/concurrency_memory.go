package core

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// leaseTable holds a MemoryStore's in-flight leases (Concurrency), with
// the semantics of the acquireLease and renewLeases scripts, on the
// store's clock. Sets are spread over independently locked shards by
// (name, subject). Its zero value is ready to use.
//
// Memory is bounded by the leases held: a set is dropped with its last
// lease, and each shard drops the sets whose leases all expired at most a
// minute after they did.
type leaseTable struct {
	once   sync.Once
	seed   maphash.Seed
	shards [16]leaseShard
}

type leaseShard struct {
	mu        sync.Mutex
	sets      map[string][]heldLease // by name + "\x00" + subject
	nextSweep int64                  // µs on the store's clock
}

// heldLease is one lease: its id and deadline (µs on the store's clock).
type heldLease struct {
	id       string
	deadline int64
}

// leaseAnswer is a store's answer to an acquire.
type leaseAnswer struct {
	allowed    bool
	held       int           // leases held after the call
	pruned     int           // leases the call found past their deadline and removed
	retryAfter time.Duration // when refused: until the earliest lease ends
	resetAfter time.Duration // until the latest lease ends
}

const leaseSweep = int64(time.Minute / time.Microsecond)

func (t *leaseTable) lock(name, subject string, now int64) (*leaseShard, string) {
	t.once.Do(func() { t.seed = maphash.MakeSeed() })
	k := name + "\x00" + subject
	sh := &t.shards[maphash.String(t.seed, k)%uint64(len(t.shards))]
	sh.mu.Lock()
	if sh.sets == nil {
		sh.sets = make(map[string][]heldLease)
	}
	if now >= sh.nextSweep {
		for k, set := range sh.sets {
			if set = prune(set, now); len(set) == 0 {
				delete(sh.sets, k)
			} else {
				sh.sets[k] = set
			}
		}
		sh.nextSweep = now + leaseSweep
	}
	return sh, k
}

// prune drops the leases whose deadline has passed.
func prune(set []heldLease, now int64) []heldLease {
	kept := set[:0]
	for _, l := range set {
		if l.deadline > now {
			kept = append(kept, l)
		}
	}
	clear(set[len(kept):])
	return kept
}

// acquireLease is the acquireLease script on s's clock. With decide, it
// is acquireWithRate's: decide(bucket.OpTake) takes the rate limit's tokens and
// reports whether it did, decide(bucket.OpPeek) only peeks, both under the lease
// set's lock, so a slot and its tokens are taken together or not at all.
func (s *MemoryStore) acquireLease(name, subject, id string, limit int, lease time.Duration, decide func(op int) bool) leaseAnswer {
	now := s.table.Now()
	sh, k := s.leases.lock(name, subject, now)
	defer sh.mu.Unlock()
	old := sh.sets[k]
	set := prune(old, now)
	a := leaseAnswer{allowed: true, pruned: len(old) - len(set)}
	full := false
	switch {
	case indexLease(set, id) >= 0:
		if decide != nil {
			decide(bucket.OpPeek)
		}
	case len(set) >= limit:
		a.allowed, full = false, true
		if decide != nil {
			decide(bucket.OpPeek)
		}
	case decide != nil && !decide(bucket.OpTake):
		a.allowed = false
	default:
		set = append(set, heldLease{id: id, deadline: now + lease.Microseconds()})
	}
	a.held = len(set)
	if len(set) == 0 {
		delete(sh.sets, k)
		return a
	}
	sh.sets[k] = set
	first, last := set[0].deadline, set[0].deadline
	for _, l := range set[1:] {
		first, last = min(first, l.deadline), max(last, l.deadline)
	}
	a.resetAfter = time.Duration(last-now) * time.Microsecond
	if full {
		a.retryAfter = time.Duration(first-now) * time.Microsecond
	}
	return a
}

// acquire is acquireLocal: the store is in this process.
func (s *MemoryStore) acquire(_ context.Context, _ time.Time, _ int64, req *leaseRequest) (leaseAnswer, error) {
	return s.acquireLocal(req), nil
}

// acquireLocal takes a slot for req, and with req.policies one token of
// them from this store's buckets of req.subj, all or nothing.
func (s *MemoryStore) acquireLocal(req *leaseRequest) leaseAnswer {
	var decide func(op int) bool
	if req.policies != nil {
		decide = func(op int) bool {
			req.rate = s.table.Apply(&bucket.Ask{Op: op, Subj: req.subj, N: 1, Policies: req.policies, Each: req.each})
			return req.rate.Allowed
		}
	}
	return s.acquireLease(req.name, req.subj, req.id, req.max, req.lease, decide)
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
	sh, k := s.leases.lock(name, subject, s.table.Now())
	defer sh.mu.Unlock()
	set := sh.sets[k]
	if i := indexLease(set, id); i >= 0 {
		sh.remove(k, set, i)
	}
}

// remove takes lease i out of set, the set of k, dropping the set with its
// last lease. sh.mu is held.
func (sh *leaseShard) remove(k string, set []heldLease, i int) {
	set[i] = set[len(set)-1]
	set[len(set)-1] = heldLease{}
	if set = set[:len(set)-1]; len(set) == 0 {
		delete(sh.sets, k)
	} else {
		sh.sets[k] = set
	}
}

// renewLease is the renewLeases script for one lease: renewed (it now
// ends a lease from now), renewExpired (past its deadline: pruned now) or
// renewGone.
func (s *MemoryStore) renewLease(name, subject, id string, lease time.Duration) renewal {
	now := s.table.Now()
	sh, k := s.leases.lock(name, subject, now)
	defer sh.mu.Unlock()
	set := sh.sets[k]
	i := indexLease(set, id)
	if i < 0 {
		return renewGone
	}
	if set[i].deadline <= now {
		sh.remove(k, set, i)
		return renewExpired
	}
	set[i].deadline = now + lease.Microseconds()
	return renewed
}

func indexLease(set []heldLease, id string) int {
	for i := range set {
		if set[i].id == id {
			return i
		}
	}
	return -1
}
