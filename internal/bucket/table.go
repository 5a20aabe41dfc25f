package bucket

import (
	"hash/maphash"
	"runtime"
	"sync"
	"time"
	"unique"
)

// Table keeps token buckets in this process, with the arithmetic of the
// Redis scripts: it is the memory store's engine (core.MemoryStore).
//
// Buckets are spread over independently locked shards by subject, so all
// policies of one subject are decided under one lock. Memory is bounded:
// buckets that have refilled completely are swept (a full bucket and a
// missing one are the same), and each shard holds at most its share of
// the table's bound. A new subject arriving at a full shard evicts the
// sampled bucket closest to full (another subject's, unless every sample
// is its own), whose subject then starts again from a full bucket.
//
// A bucket describes itself, as on Redis: it keeps the policy that wrote
// it, so a bucket written under one limit and read under another (the same
// Name, a changed Limit) carries over what was spent, and one stamped
// ahead of an injected clock that moved back is read as of its stamp and
// re-stamped by the next take (DESIGN §3, "Limits that change", "Time
// steps").
//
// A Table is safe for concurrent use.
type Table struct {
	shards   []memShard
	mask     uint64
	seed     maphash.Seed
	clock    func() time.Time
	base     time.Time
	perShard int
	sweep    int64 // µs between sweeps of one shard
}

type memShard struct {
	mu sync.Mutex
	memTable
	nextSweep int64
}

// memEpoch is where the store's clock starts, in µs: a multiple of every
// tick, large enough that an injected clock moved back past the store's
// creation (time.Time.Sub saturates at 292 years) still reads positive,
// so that tick arithmetic never needs a floor division.
const memEpoch = 10_000_000_000_000_000

// NewTable returns an empty table reading clock (nil: the monotonic
// clock), holding at most maxKeys buckets (raised to the shard count),
// each shard swept of full buckets every sweep (≤ 0: a minute).
func NewTable(clock func() time.Time, maxKeys int, sweep time.Duration) *Table {
	s := &Table{clock: clock, perShard: maxKeys, sweep: sweep.Microseconds()}
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
	for i := range s.shards {
		s.shards[i].index = make([]uint64, minSlots)
		s.shards[i].nextSweep = memEpoch + s.sweep
	}
	return s
}

// Now returns the table's clock in µs: memEpoch when it was made. Without
// an injected clock it reads only the monotonic clock (time.Since), half
// the cost of time.Now, which also reads the wall clock.
func (s *Table) Now() int64 {
	if s.clock != nil {
		return s.injectedNow()
	}
	return memEpoch + time.Since(s.base).Microseconds()
}

// injectedNow is Now with an injected clock.
func (s *Table) injectedNow() int64 { return memEpoch + s.clock().Sub(s.base).Microseconds() }

// keyHash returns the hash of key (name, subject) in the shard's table,
// never 0, from hs, subject's hash, whose low bits picked the shard: all
// policies of a subject share one shard, so they are decided under one
// lock.
func keyHash(hs uint64, k *memKey) uint64 { return (hs ^ k.hash) | 1 }

// Apply runs a (its deadline and bound are not read) with the scripts'
// arithmetic, under a.Subj's shard lock (every shard of a decision across
// subjects): every policy at once, all or nothing. a is checked (see
// CheckOp, CheckAcross).
func (s *Table) Apply(a *Ask) Outcome {
	if a.Across != nil {
		return s.applyAcross(a)
	}
	if a.Op == OpTake && len(a.Policies) == 1 {
		o := s.Take1(a.Subj, a.N, &a.Policies[0]).Outcome(0)
		if a.Each != nil {
			a.Each[0] = o
		}
		return o
	}
	sh, hs, now := s.lock(a.Subj)
	defer sh.mu.Unlock()
	return sh.applyMany(s, hs, a, now)
}

// lock locks subject's shard, sweeping it when due, and returns it with
// subject's hash (its low bits pick the shard; maphash.Comparable takes
// fewer steps than maphash.String) and the time.
func (s *Table) lock(subject string) (sh *memShard, hs uint64, now int64) {
	hs = maphash.Comparable(s.seed, subject)
	sh = &s.shards[hs&s.mask]
	// The clock is read before the lock, to keep the critical section
	// short; two callers may then reach a bucket out of clock order: see
	// recheck. The clock is read as Now reads it.
	if s.clock == nil {
		now = memEpoch + time.Since(s.base).Microseconds()
	} else {
		now = s.injectedNow()
	}
	sh.mu.Lock()
	if now >= sh.nextSweep {
		sh.sweep(now)
		sh.nextSweep = now + s.sweep
	}
	return sh, hs, now
}

// recheck returns the time to decide a bucket stamped at ts with, now
// having been read before the lock. A bucket stamped later was written by
// a caller that read the clock after us and locked first: reading the
// clock again, under the lock, orders us after it (the monotonic clock
// does not go back), so no interval is refilled twice. Only an injected
// clock moved back leaves the bucket ahead (see memBucket.read).
func (s *Table) recheck(ts, now int64) int64 {
	if ts > now {
		return s.Now()
	}
	return now
}

// Take1 is Apply of a take under one policy, the Limiter's hot path,
// answering with a Decision (see Decision). Only the bucket's
// read and write are under the lock; the answer's arithmetic (divisions)
// comes after it, shortening the wait of other callers on the shard.
func (s *Table) Take1(subject string, n int, p *Policy) Decision {
	k := &p.key
	if !k.fits(p) {
		fresh := newKey(p)
		k = &fresh
	}
	sh, hs, now := s.lock(subject)
	// One lookup: buckets are updated in place.
	h, hp := keyHash(hs, k), k.shape
	var b *memBucket
	tokens, own, st, clamped, ahead := p.Capacity, notKept, int64(0), false, false
	if i, ok := sh.find(h, k.name, subject); ok {
		b = &sh.slots[i].memBucket
		now = s.recheck(b.ts, now)
		tokens, own, st, clamped, ahead = b.read(p, hp, now)
	}
	need := int64(n) * p.Unit
	if tokens >= need {
		if b == nil {
			*sh.insert(h, k.name, subject, s.perShard) = memBucket{units: tokens - need, ts: now, shape: hp}
		} else if clamped {
			r := memRead{key: *k, tokens: tokens, own: own, shape: b.shape, clamped: true}
			*b = r.written(p, OpTake, tokens-need, now)
		} else {
			b.units, b.ts = tokens-need, now
			if b.shape != hp {
				b.shape = hp
			}
		}
		sh.mu.Unlock()
		d, _ := p.decide(tokens, n, true, now)
		return d
	}
	var kept policyShape
	if own != notKept {
		kept = b.shape.Value()
	}
	if ahead {
		b.restamp(now)
	}
	sh.mu.Unlock()
	if own != notKept {
		return p.decideKept(&kept, own, st, tokens, n, now)
	}
	d, _ := p.decide(tokens, n, false, now)
	return d
}

// put writes nb, a bucket that was taken from or refunded to, where r
// read it (its key, subject): inserted when absent. It looks the bucket up
// afresh: an insert for an earlier policy may have moved it.
func (sh *memShard) put(s *Table, r *memRead, subject string, nb memBucket) {
	b := sh.lookup(r.hash, r.key.name, subject)
	if b == nil {
		b = sh.insert(r.hash, r.key.name, subject, s.perShard)
	}
	*b = nb
}

// memRead is what applyMany read of one policy's bucket.
type memRead struct {
	hash    uint64
	key     memKey
	tokens  int64 // under the policy decided
	own     int64 // under the bucket's own policy when another, else notKept
	st      int64 // when own ≥ 0: read from the bucket's stamp (see memBucket.read)
	shape   unique.Handle[policyShape]
	clamped bool // see memBucket.read
	ahead   bool
}

// applyMany runs one operation of the script (a.Op: OpTake, OpPeek,
// OpRefund, or a waiting one) for every policy of a.Subj at once, with
// the script's arithmetic. The shard is locked; hs is a.Subj's hash. The
// deadline and bound of a are not read.
func (sh *memShard) applyMany(s *Table, hs uint64, a *Ask, now int64) Outcome {
	if kind, _ := SplitOp(a.Op); kind > OpRefund {
		return sh.applyWait(s, hs, a, now)
	}
	op, n, policies, each := a.Op, a.N, a.Policies, a.Each
	var small [4]memRead
	reads := small[:0]
	if len(policies) > len(small) {
		reads = make([]memRead, 0, len(policies))
	}
	reads, allowed, now := sh.readAll(s, hs, a, reads, now)
	var best Outcome
	for i := range policies {
		p := &policies[i]
		need := int64(n) * p.Unit
		r := &reads[i]
		var d Decision
		var left int64
		write := op == OpRefund || op == OpTake && allowed
		switch {
		case op == OpRefund:
			left = min(p.Capacity, r.tokens+need)
			d, _ = p.decide(left+need, n, true, now) // takes need: leaves left
		case write:
			d, left = p.decide(r.tokens, n, true, now)
		case r.own == notKept:
			d, _ = p.decide(r.tokens, n, false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, n, now)
		}
		d.Allowed = op == OpRefund || allowed
		// Looked up again: an insert for an earlier policy may have moved
		// this bucket.
		if write {
			sh.put(s, r, a.Subj, r.written(p, op, left, now))
		} else if op == OpTake && r.ahead {
			sh.lookup(r.hash, r.key.name, a.Subj).restamp(now)
		}
		if each != nil {
			each[i] = d.Outcome(i)
		}
		if o := d.Outcome(i); i == 0 || Binds(o, best) {
			best = o
		}
	}
	return best
}

// applyWait runs a waiting operation (a.Op: OpReserve, OpCharge,
// OpCancel, OpPause, with its argument x) for every policy of a.Subj (hs
// its hash) at once, with the script's arithmetic (the Redis script's
// waiting function; here Policy.waiting). The shard is locked.
func (sh *memShard) applyWait(s *Table, hs uint64, a *Ask, now int64) Outcome {
	kind, x := SplitOp(a.Op)
	n, policies, each := a.N, a.Policies, a.Each
	var small [4]memRead
	reads := small[:0]
	if len(policies) > len(small) {
		reads = make([]memRead, 0, len(policies))
	}
	reads, _, now = sh.readAll(s, hs, a, reads, now)
	allowed, write := true, true
	var extra int64
	switch kind {
	case OpReserve:
		// Booked when its n tokens exist under every policy within x µs.
		most := untilAll(policies, reads, n, now)
		if most > x {
			allowed, write = false, false
		} else {
			extra = now + most
		}
	case OpCancel:
		if now >= x {
			allowed, write = false, false
		}
	}
	var best Outcome
	for i := range policies {
		p := &policies[i]
		r := &reads[i]
		var d Decision
		switch {
		case write:
			var left int64
			var wait time.Duration
			left, wait, extra = p.waiting(kind, x, n, r.tokens, extra, now)
			d, _ = p.decide(left, 0, true, now) // the bucket as left
			d.RetryAfter = wait
			sh.put(s, r, a.Subj, r.written(p, kind, left, now))
		case r.own == notKept:
			d, _ = p.decide(r.tokens, n, false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, n, now)
		}
		d.Allowed = allowed
		o := d.Outcome(i)
		if each != nil {
			each[i] = o
		}
		if i == 0 || Binds(o, best) {
			best = o
		}
	}
	best.Extra = extra
	return best
}

// untilAll returns the µs from now until n tokens exist under every
// policy, its bucket read as reads[i]: 0 when they all hold them.
func untilAll(policies []Policy, reads []memRead, n int, now int64) int64 {
	var most int64
	for i := range policies {
		p := &policies[i]
		if short := int64(n)*p.Unit - reads[i].tokens; short > 0 {
			most = max(most, CeilDiv(short, p.Refill)*p.Tick-now%p.Tick)
		}
	}
	return most
}

// readAll reads a.Subj's bucket (hs its hash) under each policy into
// reads, at one time: now, or a later one when a bucket is stamped ahead
// of it. It reports whether every policy holds a.N tokens.
func (sh *memShard) readAll(s *Table, hs uint64, a *Ask, reads []memRead, now int64) ([]memRead, bool, int64) {
	subject, n, policies := a.Subj, a.N, a.Policies
	allowed, rechecked := true, false
	for i := 0; i < len(policies); i++ {
		p := &policies[i]
		k := memKeyOf(p)
		r := memRead{hash: keyHash(hs, &k), key: k, tokens: p.Capacity, own: notKept}
		if b := sh.lookup(r.hash, k.name, subject); b != nil {
			if !rechecked && b.ts > now {
				// Every policy is decided at one time: start again.
				now, rechecked = s.recheck(b.ts, now), true
				reads, allowed, i = reads[:0], true, -1
				continue
			}
			r.tokens, r.own, r.st, r.clamped, r.ahead = b.read(p, k.shape, now)
			r.shape = b.shape
		}
		reads = append(reads, r)
		if r.tokens < int64(n)*p.Unit {
			allowed = false
		}
	}
	return reads, allowed, now
}

// Len returns the number of buckets held.
func (s *Table) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.used
		sh.mu.Unlock()
	}
	return n
}

// Clear makes subject's buckets under policies full again.
func (s *Table) Clear(subject string, policies []Policy) {
	sh, hs, _ := s.lock(subject)
	for i := range policies {
		k := memKeyOf(&policies[i])
		if j, ok := sh.find(keyHash(hs, &k), k.name, subject); ok {
			sh.remove(j)
		}
	}
	sh.mu.Unlock()
}
