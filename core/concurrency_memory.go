package core

import (
	"hash/maphash"
	"sync"
	"time"
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

// acquireLease is the acquireLease script on s's clock.
func (s *MemoryStore) acquireLease(name, subject, id string, limit int, lease time.Duration) leaseAnswer {
	now := s.now()
	sh, k := s.leases.lock(name, subject, now)
	defer sh.mu.Unlock()
	set := prune(sh.sets[k], now)
	allowed := true
	if indexLease(set, id) < 0 {
		if len(set) >= limit {
			allowed = false
		} else {
			set = append(set, heldLease{id: id, deadline: now + lease.Microseconds()})
		}
	}
	a := leaseAnswer{allowed: allowed, held: len(set)}
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
	if !allowed {
		a.retryAfter = time.Duration(first-now) * time.Microsecond
	}
	return a
}

// releaseLease removes lease id, if held.
func (s *MemoryStore) releaseLease(name, subject, id string) {
	sh, k := s.leases.lock(name, subject, s.now())
	defer sh.mu.Unlock()
	set := sh.sets[k]
	if i := indexLease(set, id); i >= 0 {
		set[i] = set[len(set)-1]
		set[len(set)-1] = heldLease{}
		set = set[:len(set)-1]
	}
	if len(set) == 0 {
		delete(sh.sets, k)
	} else {
		sh.sets[k] = set
	}
}

// renewLease is the renewLeases script for one lease: it reports whether
// the lease still existed and now ends a lease from now.
func (s *MemoryStore) renewLease(name, subject, id string, lease time.Duration) bool {
	now := s.now()
	sh, k := s.leases.lock(name, subject, now)
	defer sh.mu.Unlock()
	set := sh.sets[k]
	i := indexLease(set, id)
	if i < 0 {
		return false
	}
	if set[i].deadline <= now {
		if set = prune(set, now); len(set) == 0 {
			delete(sh.sets, k)
		} else {
			sh.sets[k] = set
		}
		return false
	}
	set[i].deadline = now + lease.Microseconds()
	return true
}

func indexLease(set []heldLease, id string) int {
	for i := range set {
		if set[i].id == id {
			return i
		}
	}
	return -1
}
