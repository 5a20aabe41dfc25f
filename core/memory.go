package core

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"time"
)

// MemoryStore keeps token buckets in this process, with the same semantics
// as RedisStore. It serves single-instance apps, tests, the FailLocal
// fallback and demos; it does not share limits between processes.
//
// Buckets are spread over independently locked shards by subject, so all
// policies of one subject are decided under one lock. Memory is bounded:
// buckets that have refilled completely are swept (a full bucket and a
// missing one are the same), and each shard holds at most its share of
// WithMaxKeys. A new subject arriving at a full shard evicts the sampled
// bucket closest to full (another subject's, unless every sample is its
// own), whose subject then starts again from a full bucket.
//
// A MemoryStore is safe for concurrent use and needs no Close.
type MemoryStore struct {
	shards   []memShard
	mask     uint64
	seed     maphash.Seed
	clock    func() time.Time
	base     time.Time
	perShard int
	sweep    int64 // µs between sweeps of one shard

	names nameBook // the policy names of the limiters using the store
}

type memShard struct {
	mu sync.Mutex
	memTable
	nextSweep int64
	// The policy name last decided here and its hash: a store mostly
	// serves one limiter, so its name is hashed once, not per decision.
	name     string
	nameHash uint64
	_        [56]byte // keep shards on separate cache lines
}

type memBucket struct {
	units int64 // tokens in units at ts
	ts    int64 // µs on the store's clock; never moves back, so no interval is refilled twice
	full  int64 // µs at which the bucket is full again
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// WithClock sets the clock the store reads; default time.Now. Tests inject
// one to move time without sleeping.
func WithClock(now func() time.Time) MemoryOption {
	if now == nil {
		panic("core: WithClock(nil)")
	}
	return func(s *MemoryStore) { s.clock = now }
}

// DefaultMaxKeys is the default bound on buckets held by a MemoryStore:
// at most about 130 MB, 128 bytes a bucket (a 64-byte slot in tables kept
// at most 3/4 full; subjects' own bytes come on top).
const DefaultMaxKeys = 1 << 20

// WithMaxKeys bounds the number of buckets (one per policy and subject);
// default DefaultMaxKeys. Values below the shard count are raised to it.
func WithMaxKeys(n int) MemoryOption {
	return func(s *MemoryStore) { s.perShard = n }
}

// WithSweepInterval sets how often each shard drops buckets that are full
// again; default one minute.
func WithSweepInterval(d time.Duration) MemoryOption {
	return func(s *MemoryStore) { s.sweep = d.Microseconds() }
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{perShard: DefaultMaxKeys, sweep: time.Minute.Microseconds()}
	for _, o := range opts {
		if o == nil {
			panic("core: nil MemoryOption")
		}
		o(s)
	}
	n := 16
	for n < 8*runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	s.shards = make([]memShard, n)
	s.mask = uint64(n - 1)
	if s.perShard < n {
		s.perShard = n
	}
	s.perShard /= n
	if s.sweep <= 0 {
		s.sweep = time.Minute.Microseconds()
	}
	s.seed = maphash.MakeSeed()
	if s.clock != nil {
		s.base = s.clock()
	} else {
		s.base = time.Now()
	}
	// The memoized name starts as "", so its hash must be the hash of ""
	// (not 0): a policy named "" would otherwise hash one way or the
	// other depending on which names the shard saw before.
	empty := maphash.String(s.seed, "")
	for i := range s.shards {
		s.shards[i].slots = make([]memSlot, minSlots)
		s.shards[i].nextSweep = s.sweep
		s.shards[i].nameHash = empty
	}
	return s
}

var _ Store = (*MemoryStore)(nil)

// now returns the store's clock in µs since it was made. Without an
// injected clock it reads only the monotonic clock (time.Since), half the
// cost of time.Now, which also reads the wall clock.
func (s *MemoryStore) now() int64 {
	if s.clock == nil {
		return time.Since(s.base).Microseconds()
	}
	return s.clock().Sub(s.base).Microseconds()
}

// Take implements Store. It never blocks on I/O, and fails only for a
// malformed request (see Store).
func (s *MemoryStore) Take(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := checkTake(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	return s.take(subject, n, policies, each), nil
}

// hash returns the hash of key (name, subject) in the shard's table, never
// 0. hs is subject's hash, whose low bits picked the shard: all policies
// of a subject share one shard, so they are decided under one lock.
func (sh *memShard) hash(s *MemoryStore, hs uint64, name string) uint64 {
	if name != sh.name {
		sh.name, sh.nameHash = name, maphash.String(s.seed, name)
	}
	return (hs ^ sh.nameHash) | 1
}

func (s *MemoryStore) take(subject string, n int, policies []Policy, each []Outcome) Outcome {
	if len(policies) == 1 {
		o := s.take1(subject, n, &policies[0]).outcome(0)
		if each != nil {
			each[0] = o
		}
		return o
	}
	sh, hs, now := s.lock(subject)
	o := sh.applyMany(s, hs, subject, opTake, n, policies, each, now)
	sh.mu.Unlock()
	return o
}

// lock locks subject's shard, sweeping it when due, and returns it with
// subject's hash and the time.
func (s *MemoryStore) lock(subject string) (sh *memShard, hs uint64, now int64) {
	hs = maphash.String(s.seed, subject)
	sh = &s.shards[hs&s.mask]
	// The clock is read before the lock, to keep the critical section
	// short; two callers may then reach a bucket out of clock order, so a
	// bucket's time never moves back (see memBucket.ts).
	now = s.now()
	sh.mu.Lock()
	if now >= sh.nextSweep {
		sh.sweep(now)
		sh.nextSweep = now + s.sweep
	}
	return sh, hs, now
}

// take1 is take for one policy, the Limiter's hot path.
func (s *MemoryStore) take1(subject string, n int, p *Policy) decision {
	sh, hs, now := s.lock(subject)
	// One lookup: buckets are updated in place.
	h := sh.hash(s, hs, p.Name)
	var b *memBucket
	if i, ok := sh.find(h, p.Name, subject); ok {
		b = &sh.slots[i].memBucket
	}
	tokens := p.Capacity
	if b != nil {
		tokens = p.refill(b.units, b.ts, now)
	}
	allowed := tokens >= int64(n)*p.Unit
	d, left := p.decide(tokens, n, allowed, now)
	if allowed {
		sh.put(s, b, h, p.Name, subject, left, now, d.resetAfter)
	}
	sh.mu.Unlock()
	return d
}

// put writes a bucket that was taken from: b, or, when nil, a bucket
// inserted for key (name, subject), holds left units at now, or at its own
// later time (a bucket's time never moves back).
func (sh *memShard) put(s *MemoryStore, b *memBucket, h uint64, name, subject string, left, now int64, resetAfter time.Duration) {
	ts := now
	if b == nil {
		b = sh.insert(h, name, subject, s.perShard)
	} else {
		ts = max(ts, b.ts)
	}
	*b = memBucket{units: left, ts: ts, full: ts + int64(resetAfter/time.Microsecond)}
}

// applyMany runs one operation of the script (opTake, opPeek, opRefund)
// for every policy of subject at once, with the script's arithmetic. The
// shard is locked.
func (sh *memShard) applyMany(s *MemoryStore, hs uint64, subject string, op, n int, policies []Policy, each []Outcome, now int64) Outcome {
	var small [4]int64
	var smallH [4]uint64
	tokens, hashes := small[:0], smallH[:0]
	if len(policies) > len(small) {
		tokens, hashes = make([]int64, 0, len(policies)), make([]uint64, 0, len(policies))
	}
	allowed := true
	for i := range policies {
		p := &policies[i]
		h := sh.hash(s, hs, p.Name)
		t := p.Capacity
		if b := sh.lookup(h, p.Name, subject); b != nil {
			t = p.refill(b.units, b.ts, now)
		}
		tokens, hashes = append(tokens, t), append(hashes, h)
		if t < int64(n)*p.Unit {
			allowed = false
		}
	}
	var best Outcome
	for i := range policies {
		p := &policies[i]
		need := int64(n) * p.Unit
		var d decision
		var left int64
		write := false
		switch op {
		case opTake:
			d, left = p.decide(tokens[i], n, allowed, now)
			write = allowed
		case opPeek:
			d, _ = p.decide(tokens[i], n, false, now)
			d.allowed = allowed
		case opRefund:
			left = min(p.Capacity, tokens[i]+need)
			d, _ = p.decide(left+need, n, true, now) // takes need: leaves left
			write = true
		}
		o := d.outcome(i)
		if write {
			// Looked up again: an insert for an earlier policy may have
			// moved this bucket.
			h := hashes[i]
			sh.put(s, sh.lookup(h, p.Name, subject), h, p.Name, subject, left, now, o.ResetAfter)
		}
		if each != nil {
			each[i] = o
		}
		if i == 0 || binds(o, best) {
			best = o
		}
	}
	return best
}

// Len returns the number of buckets held, for tests and metrics.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.used
		sh.mu.Unlock()
	}
	return n
}

// Reset implements Resetter: subject's buckets become full again.
func (s *MemoryStore) Reset(_ context.Context, subject string, policies []Policy) error {
	hs := maphash.String(s.seed, subject)
	sh := &s.shards[hs&s.mask]
	sh.mu.Lock()
	for i := range policies {
		name := policies[i].Name
		if j, ok := sh.find(sh.hash(s, hs, name), name, subject); ok {
			sh.remove(j)
		}
	}
	sh.mu.Unlock()
	return nil
}
