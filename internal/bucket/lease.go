package bucket

import (
	"hash/maphash"
	"sync"
	"time"
)

// Leases holds in-process in-flight leases (core.Concurrency's on a
// MemoryStore, and FailLocal's), with the semantics of the acquireLease
// and renewLeases scripts, on the clock of whoever calls it (µs). Sets are
// spread over independently locked shards by (name, subject). Its zero
// value is ready to use, and it is safe for concurrent use.
//
// Memory is bounded by the leases held: a set is dropped with its last
// lease, and each shard drops the sets whose leases all expired at most a
// minute after they did.
type Leases struct {
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

// LeaseAsk is one acquire of a slot (core.Concurrency's, on every store):
// of Subj's set under Name (Subj as the store keys it), for lease ID,
// held at most Max at once and each for Lease; with Policies (a
// Concurrency's Rate), one token of them too, all or nothing. The store
// fills Each (every policy's outcome, when not nil) and Rate (the binding
// one). Timeout bounds the call a Redis store makes to take back an
// acquire whose answer was lost.
type LeaseAsk struct {
	Name, Subj, ID string
	Max            int
	Lease          time.Duration
	Timeout        time.Duration
	Policies       []Policy
	Each           []Outcome
	Rate           Outcome
}

// LeaseAnswer is a store's answer to an acquire (the in-process table's
// and the Redis transport's).
type LeaseAnswer struct {
	Allowed    bool
	Held       int           // leases held after the call
	Pruned     int           // leases the call found past their deadline and removed
	RetryAfter time.Duration // when refused: until the earliest lease ends
	ResetAfter time.Duration // until the latest lease ends
}

// Renewal is what became of one lease's renewal (see Leases.Renew, and
// the Redis transport's).
type Renewal int8

// The renewals.
const (
	RenewUnknown Renewal = iota // the call failed: tried again next round
	Renewed                     // it now ends a lease from now
	RenewGone                   // not held: released, or never taken, or pruned already
	RenewExpired                // past its deadline: pruned now
)

const leaseSweep = int64(time.Minute / time.Microsecond)

func (t *Leases) lock(name, subject string, now int64) (*leaseShard, string) {
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

// Acquire is the acquireLease script at now. With decide, it is
// acquireWithRate's: decide(OpTake) takes the rate limit's tokens and
// reports whether it did, decide(OpPeek) only peeks, both under the lease
// set's lock, so a slot and its tokens are taken together or not at all.
func (t *Leases) Acquire(now int64, a *LeaseAsk, decide func(op int) bool) LeaseAnswer {
	sh, k := t.lock(a.Name, a.Subj, now)
	defer sh.mu.Unlock()
	old := sh.sets[k]
	set := prune(old, now)
	ans := LeaseAnswer{Allowed: true, Pruned: len(old) - len(set)}
	full := false
	switch {
	case indexLease(set, a.ID) >= 0:
		if decide != nil {
			decide(OpPeek)
		}
	case len(set) >= a.Max:
		ans.Allowed, full = false, true
		if decide != nil {
			decide(OpPeek)
		}
	case decide != nil && !decide(OpTake):
		ans.Allowed = false
	default:
		set = append(set, heldLease{id: a.ID, deadline: now + a.Lease.Microseconds()})
	}
	ans.Held = len(set)
	if len(set) == 0 {
		delete(sh.sets, k)
		return ans
	}
	sh.sets[k] = set
	first, last := set[0].deadline, set[0].deadline
	for _, l := range set[1:] {
		first, last = min(first, l.deadline), max(last, l.deadline)
	}
	ans.ResetAfter = time.Duration(last-now) * time.Microsecond
	if full {
		ans.RetryAfter = time.Duration(first-now) * time.Microsecond
	}
	return ans
}

// Release removes lease id of subject's set under name, if held.
func (t *Leases) Release(now int64, name, subject, id string) {
	sh, k := t.lock(name, subject, now)
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

// Renew is the renewLeases script for one lease at now: Renewed (it now
// ends lease from now), RenewExpired (past its deadline: pruned now) or
// RenewGone.
func (t *Leases) Renew(now int64, name, subject, id string, lease time.Duration) Renewal {
	sh, k := t.lock(name, subject, now)
	defer sh.mu.Unlock()
	set := sh.sets[k]
	i := indexLease(set, id)
	if i < 0 {
		return RenewGone
	}
	if set[i].deadline <= now {
		sh.remove(k, set, i)
		return RenewExpired
	}
	set[i].deadline = now + lease.Microseconds()
	return Renewed
}

func indexLease(set []heldLease, id string) int {
	for i := range set {
		if set[i].id == id {
			return i
		}
	}
	return -1
}
