package core

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// denyCache remembers, per subject and limit, the earliest moment the
// bucket could serve a cost again, and denies that cost locally to the
// callers that arrived before then, so a flood on an exhausted key costs
// almost no round trips.
//
// It stays exact. A deadline comes from the store's own answer — RetryAfter
// when denied, or, when allowed with fewer than n tokens left, the moment n
// tokens are back (ResetAfter less the time (C-n) tokens take) — measured
// from before the request was sent. So it is never later than the moment
// the store's clock has the tokens (other instances only ever take
// tokens), and a hit only ever denies. A caller that arrived before the
// deadline is denied even when the answer comes after it: either the
// bucket lacked the tokens when the caller arrived, or the call ran later,
// while the caller waited, and found them lacking then. A cheaper request
// goes to the store.
//
// Once a key's bucket is found short, the key's callers that the cache
// cannot deny wait for the next answer rather than all asking the store
// at once: one of them (the probe) asks, and a new probe leaves every
// probeEvery while the callers keep coming. Each waiter is answered by
// the first answer that proves it denied, or asks the store itself (when
// the probe it found, or an answer that left tokens to spare, cannot
// prove it denied: the callers waiting then ask together): so a
// flood on one key costs about one store call per probeEvery, and a
// waiter is answered within about max(probeEvery, a round trip) + a
// round trip of its arrival — within its Timeout while a round trip is
// well within it (see probeEvery): a client's own traffic does not turn
// its decisions into FailMode's. An answer after which the bucket has
// refilled a good part ends it.
//
// Memory is bounded: each shard holds at most its share of the capacity
// (a denial per subject and limit, at most maxLimits limits per subject),
// drops passed entries when full, and otherwise does not cache.
type denyCache struct {
	shards  [32]denyShard
	seed    maphash.Seed
	per     int
	timeout int64 // ns: the limiter's Timeout
}

type denyShard struct {
	mu        sync.Mutex
	m         map[string]*denial // a subject's denials, one per limit, listed by next
	size      int                // denials in m, tombstones included
	lastSweep int64
	_         [32]byte
}

type denial struct {
	until     int64  // ns on the limiter's clock: cost n is denied to callers arriving before this
	n         int    // 0: a tombstone left by forget, denying nothing
	name      string // the policy name it answered for (the limiter's, or Under's)
	lim       Limit  // the limit the store answered for (AllowLimit's, or Config.Limit)
	res       Result // what to answer, as of decidedAt
	decidedAt int64
	refill    int64         // ns until n tokens refill under lim
	took      int64         // ns: the last answer's round trip
	probing   bool          // a probe sent at probeAt is asking the store
	probeAt   int64         // when the newest probe left
	spareAt   int64         // when an answer last left n tokens to spare
	wake      chan struct{} // closed at the next answer; nil until a caller waits
	next      *denial       // the subject's denial under another limit
}

// maxLimits bounds the limits one subject has denials for: a client
// alternating routes that give its key different limits is answered from
// the cache under each (DESIGN §3, "keyed by the limit it answered for").
const maxLimits = 4

// defaultDenyCacheSize bounds the denial cache of one limiter.
const defaultDenyCacheSize = 1 << 16

func newDenyCache(size int, timeout time.Duration) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/32), timeout: int64(timeout)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*denial)
	}
	return c
}

func (c *denyCache) shard(subject string) *denyShard {
	return &c.shards[maphash.String(c.seed, subject)%uint64(len(c.shards))]
}

// find returns subject's denial under lim in the buckets of policy name,
// nil if none. The shard is locked.
func (sh *denyShard) find(subject, name string, lim Limit) *denial {
	for d := sh.m[subject]; d != nil; d = d.next {
		if d.lim == lim && d.name == name && d.n != 0 {
			return d
		}
	}
	return nil
}

// lookup outcomes
const (
	cacheMiss  = iota // ask the store
	cacheDeny         // denied locally; the Result is valid
	cacheWait         // wait for the channel or the time lookup returns, then look again
	cacheProbe        // this caller is the probe: ask the store, then record or settle
)

// cacheAsk is what the cache is asked about: cost n of subject under lim,
// in the buckets of policy name.
type cacheAsk struct {
	subject string
	name    string
	n       int
	lim     Limit
}

// lookup decides what a caller asking a (cost n under lim), arrived at
// arrival, does at now. Only a denial for the same cost under the same limit
// answers it: a bigger limit (a tenant's new plan) may serve what a
// smaller one refused. A caller told to wait waits for the channel (the
// next answer) or until the time returned (the probe is probeEvery old),
// whichever comes first, and looks again with the same arrival. A
// caller told to probe sends its call at now.
func (c *denyCache) lookup(a cacheAsk, arrival, now int64) (Result, <-chan struct{}, int64, int) {
	subject, n, lim := a.subject, a.n, a.lim
	sh := c.shard(subject)
	sh.mu.Lock()
	d := sh.find(subject, a.name, lim)
	if d == nil || n != d.n {
		sh.mu.Unlock()
		return Result{}, nil, 0, cacheMiss
	}
	if arrival < d.until {
		r, until, decidedAt := d.res, d.until, d.decidedAt
		sh.mu.Unlock()
		return aged(r, n, time.Duration(max(0, until-now)), time.Duration(now-decidedAt)), nil, 0, cacheDeny
	}
	// An answer with tokens to spare came after the caller arrived: it
	// asks the store, unless a probe sent since it arrived is still out,
	// whose answer will prove it denied, or find the tokens.
	if arrival < d.spareAt && (!d.probing || d.probeAt < arrival) {
		sh.mu.Unlock()
		return Result{}, nil, 0, cacheMiss
	}
	// Wait for the probe in flight, unless it left probeEvery ago and
	// the caller has the time for a round trip of its own, with a margin
	// of a quarter of what Timeout leaves after one: then it probes. So
	// while callers wait, probes leave every probeEvery, and the bucket
	// never refills unseen.
	if d.probing {
		every, at := c.probeEvery(d), int64(math.MaxInt64)
		if now-d.probeAt < every {
			at = d.probeAt + every
		}
		if at != math.MaxInt64 || now+d.took+(c.timeout-d.took)/4 >= arrival+c.timeout {
			if d.wake == nil {
				d.wake = make(chan struct{})
			}
			ch := d.wake
			sh.mu.Unlock()
			return Result{}, ch, at, cacheWait
		}
	}
	d.probing, d.probeAt = true, now
	sh.mu.Unlock()
	return Result{}, nil, 0, cacheProbe
}

// probeEvery is how often a new probe leaves for d's key while callers
// keep coming: twice in the time n tokens take to refill, so that a probe
// a little late still finds fewer than 2n (n to spare after a probe sends
// its waiting callers to the store, which may take them past Timeout),
// and at least twice in what Timeout leaves after a round trip (the last
// answer's). A caller the probe it found cannot prove denied is answered
// by the next one, sent at most probeEvery later: within probeEvery + a
// round trip, less than (Timeout + a round trip) / 2, so within Timeout.
func (c *denyCache) probeEvery(d *denial) int64 {
	return min(d.refill/2, (c.timeout-d.took)/2)
}

// wakeAll wakes the callers waiting on d. The shard is locked.
func (d *denial) wakeAll() {
	if d.wake != nil {
		close(d.wake)
		d.wake = nil
	}
}

// aged is the answer the store would give now to cost n, from its answer r
// learnt el ago that cost n waits until retry from now: every wait and
// reset el shorter, the binding limit the one waiting longest. r's
// Policies are copied, never shared between callers.
func aged(r Result, n int, retry, el time.Duration) Result {
	wasAllowed := r.Allowed
	r.Allowed = false
	r.RetryAfter = retry
	r.ResetAfter = max(0, r.ResetAfter-el)
	r.Remaining = remainingAt(r.Limit, r.Remaining, r.ResetAfter)
	if r.Policies == nil {
		return r
	}
	ps := make([]PolicyResult, len(r.Policies))
	best := -1
	for i, p := range r.Policies {
		wait := p.RetryAfter
		if wasAllowed {
			wait = refillFor(p.Limit, p.Remaining, n, p.ResetAfter)
		}
		p.RetryAfter = max(0, wait-el)
		p.ResetAfter = max(0, p.ResetAfter-el)
		p.Remaining = remainingAt(p.Limit, p.Remaining, p.ResetAfter)
		ps[i] = p
		if p.RetryAfter > 0 && (best < 0 || p.RetryAfter > ps[best].RetryAfter) {
			best = i
		}
	}
	if best >= 0 {
		ps[best].RetryAfter = retry
		r.Name, r.Limit, r.Remaining, r.ResetAfter = ps[best].Name, ps[best].Limit, ps[best].Remaining, ps[best].ResetAfter
	}
	r.Policies = ps
	return r
}

// remainingAt is the whole tokens in a bucket of l that held remaining
// and is full in resetAfter: what refilled since counts.
func remainingAt(l Limit, remaining int, resetAfter time.Duration) int {
	p := l.policy("")
	missing := bucket.CeilDiv(int64(resetAfter/time.Microsecond), p.Tick) * p.Refill
	return max(remaining, int((p.Capacity-missing)/p.Unit))
}

// record learns from the store's answer r, arrived at now, to a request
// a (cost n under lim) sent at sent (probe: the caller was told to probe
// at sent), and wakes the callers waiting for an answer. An answer that
// leaves fewer than n tokens is kept, even when the deadline it gives has
// already passed (the bucket refills faster than the store answers): it
// denies the callers that arrived before that deadline, and it sends the
// key's next callers through probes. An answer after which the bucket
// could serve n at once releases the callers waiting, and ends the key's
// entry, once its deadline passed, when it has refilled a good part —
// unless the entry learnt from a later call.
func (c *denyCache) record(a cacheAsk, sent, now int64, r Result, probe bool) {
	subject, n, lim := a.subject, a.n, a.lim
	next := int64(nextServe(r, n))
	until := sent + next
	if next > 0 && r.Policies != nil {
		// The caller owns r.Policies: keep a copy.
		r.Policies = append([]PolicyResult(nil), r.Policies...)
	}
	sh := c.shard(subject)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if head := sh.m[subject]; head != nil && head.n == 0 && sent <= head.decidedAt {
		// Asked before a refund or reset answered: the answer may
		// predate it, and must not deny what the refund gave back.
		return
	}
	d := sh.find(subject, a.name, lim)
	if d != nil {
		if probe && d.probing && d.probeAt == sent {
			d.probing = false
		}
		d.wakeAll()
	}
	switch {
	case next <= 0:
		// Unless the call left before the one the entry learnt from (a
		// batch's answers come back in any order), the bucket has tokens
		// to spare: the callers waiting ask the store, together; the next
		// ones go on probing, rather than each sending its own call as it
		// comes, until the bucket has refilled a good part (a quarter, at
		// least 2n): then the key is no longer short.
		switch {
		case d == nil || sent < d.decidedAt:
		case d.until <= now && r.Remaining >= max(2*n, r.Limit.Capacity()/4):
			sh.remove(subject, d)
		default:
			d.spareAt = now
		}
	case d != nil:
		if n != d.n || until > d.until {
			d.until, d.n, d.res, d.decidedAt, d.refill = until, n, r, sent, refillTime(lim, n)
		}
		d.took = now - sent
	default:
		if sh.size >= c.per && !sh.sweep(c.per, now) {
			return
		}
		d = &denial{until: until, n: n, name: a.name, lim: lim, res: r, decidedAt: sent, refill: refillTime(lim, n), took: now - sent}
		sh.add(subject, d)
	}
}

// settle tells the waiters of a's denial that the probe sent at sent got
// no answer (degraded): one of them probes next.
func (c *denyCache) settle(a cacheAsk, sent int64) {
	sh := c.shard(a.subject)
	sh.mu.Lock()
	if d := sh.find(a.subject, a.name, a.lim); d != nil {
		if d.probing && d.probeAt == sent {
			d.probing = false
		}
		d.wakeAll()
	}
	sh.mu.Unlock()
}

// add lists d, new, among subject's denials: first, in place of the
// oldest when the subject has maxLimits. The shard is locked.
func (sh *denyShard) add(subject string, d *denial) {
	head := sh.m[subject]
	if head != nil && head.n == 0 {
		// A passed tombstone (record checked it): d replaces it.
		sh.size--
		head = nil
	}
	d.next = head
	sh.m[subject] = d
	sh.size++
	k, last := 1, d
	for ; last.next != nil && k < maxLimits; k++ {
		last = last.next
	}
	if last.next != nil {
		last.next.wakeAll()
		last.next = nil
		sh.size--
	}
}

// remove drops d from subject's denials. The shard is locked.
func (sh *denyShard) remove(subject string, d *denial) {
	d.wakeAll()
	p := sh.m[subject]
	if p == d {
		if d.next == nil {
			delete(sh.m, subject)
		} else {
			sh.m[subject] = d.next
		}
		sh.size--
		return
	}
	for ; p != nil; p = p.next {
		if p.next == d {
			p.next = d.next
			sh.size--
			return
		}
	}
}

// sweep drops denials passed at now and not probing, at most every 10ms;
// it reports whether the shard has room. The shard is locked.
func (sh *denyShard) sweep(per int, now int64) bool {
	if now-sh.lastSweep > int64(10*time.Millisecond) {
		sh.lastSweep = now
		for k, head := range sh.m {
			for d := head; d != nil; {
				next := d.next
				if now >= d.until && !d.probing {
					sh.remove(k, d)
				}
				d = next
			}
		}
	}
	return sh.size < per
}

// forget drops subject's denials under every limit once a refund or reset
// has answered at now (the limiter's clock), and for ttl (the longest a
// decision can be in flight) ignores the answers to decisions sent before
// now: a probe whose store call ran before the refund would otherwise
// cache a denial of the tokens the refund gave back.
func (c *denyCache) forget(subject string, now, ttl int64) {
	sh := c.shard(subject)
	sh.mu.Lock()
	head, ok := sh.m[subject]
	for d := head; d != nil; d = d.next {
		d.wakeAll()
		sh.size--
	}
	if ok || sh.size < c.per || sh.sweep(c.per, now) {
		sh.m[subject] = &denial{until: now + ttl, decidedAt: now}
		sh.size++
	}
	sh.mu.Unlock()
}

// refillTime is how long n tokens take to refill under lim, in ns (at
// most about 292 years).
func refillTime(lim Limit, n int) int64 {
	p := lim.policy("")
	ticks, per := bucket.CeilDiv(int64(n)*p.Unit, p.Refill), p.Tick*int64(time.Microsecond)
	if ticks > math.MaxInt64/per {
		return math.MaxInt64
	}
	return ticks * per
}

// nextServe is how long after the decision r the store could first serve
// cost n again, at the earliest; ≤ 0 when it might at once.
func nextServe(r Result, n int) time.Duration {
	if !r.Allowed {
		return r.RetryAfter
	}
	if r.Policies == nil {
		return refillFor(r.Limit, r.Remaining, n, r.ResetAfter)
	}
	var d time.Duration
	for _, p := range r.Policies {
		d = max(d, refillFor(p.Limit, p.Remaining, n, p.ResetAfter))
	}
	return d
}

// refillFor: after an allowed decision leaving remaining whole tokens and a
// bucket full in resetAfter, n tokens exist no sooner than the bucket is
// full less the time C-n tokens take (less 1µs for resetAfter's rounding up).
func refillFor(l Limit, remaining, n int, resetAfter time.Duration) time.Duration {
	if remaining >= n {
		return 0
	}
	p := l.policy("")
	spare := time.Duration(bucket.CeilDiv(p.Capacity-int64(n)*p.Unit, p.Refill)*p.Tick) * time.Microsecond
	return resetAfter - spare - time.Duration(p.Tick)*time.Microsecond
}
