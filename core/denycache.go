package core

import (
	"hash/maphash"
	"sync"
	"time"
)

// denyCache remembers, per subject, the earliest moment the bucket could
// serve a cost again, and denies that cost (or more) locally until then, so
// a flood on an exhausted key costs almost no round trips.
//
// It stays exact. A deadline comes from the store's own answer — RetryAfter
// when denied, or, when allowed with fewer than n tokens left, the moment n
// tokens are back (ResetAfter less the time (C-n) tokens take) — measured
// from before the request was sent. So it is never later than the moment
// the store's clock has the tokens (other instances only ever take tokens),
// and a hit only ever denies. A cheaper request goes to the store.
//
// When a deadline passes, one caller (the probe) asks the store; concurrent
// callers for that subject wait for its answer instead of all asking at
// once, then decide from the refreshed entry. So store calls for a hot key
// stay near the admitted rate, plus one per deadline. A bucket that
// refills faster than the store answers gets no entry (see record): each
// of its callers asks the store, in one round trip.
//
// Memory is bounded: each shard holds at most its share of the capacity,
// drops passed entries when full, and otherwise does not cache.
type denyCache struct {
	shards [32]denyShard
	seed   maphash.Seed
	per    int
}

type denyShard struct {
	mu        sync.Mutex
	m         map[string]*denial
	lastSweep int64
	_         [32]byte
}

type denial struct {
	until     int64  // ns on the limiter's clock: cost n is denied before this
	n         int    // 0: a tombstone left by forget, denying nothing
	lim       Limit  // the limit the store answered for (AllowLimit's, or Config.Limit)
	res       Result // what to answer, as of decidedAt
	decidedAt int64
	probe     chan struct{} // non-nil while a probe is asking the store
}

// defaultDenyCacheSize bounds the denial cache of one limiter.
const defaultDenyCacheSize = 1 << 16

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/32)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*denial)
	}
	return c
}

func (c *denyCache) shard(subject string) *denyShard {
	return &c.shards[maphash.String(c.seed, subject)%uint64(len(c.shards))]
}

// lookup outcomes
const (
	cacheMiss  = iota // ask the store
	cacheDeny         // denied locally; the Result is valid
	cacheWait         // a probe is asking the store: wait on the channel, then look again
	cacheProbe        // this caller is the probe: ask the store, then store or settle
)

// lookup decides what a caller with cost n under lim does at now. Only a
// denial for the same cost under the same limit answers it: a bigger
// limit (a tenant's new plan) may serve what a smaller one refused.
func (c *denyCache) lookup(subject string, n int, lim Limit, now int64) (Result, <-chan struct{}, int) {
	sh := c.shard(subject)
	sh.mu.Lock()
	d, ok := sh.m[subject]
	if !ok || n != d.n || lim != d.lim {
		sh.mu.Unlock()
		return Result{}, nil, cacheMiss
	}
	if now < d.until {
		r, until, decidedAt := d.res, d.until, d.decidedAt
		sh.mu.Unlock()
		return aged(r, n, time.Duration(until-now), time.Duration(now-decidedAt)), nil, cacheDeny
	}
	if d.probe != nil {
		ch := d.probe
		sh.mu.Unlock()
		return Result{}, ch, cacheWait
	}
	d.probe = make(chan struct{})
	sh.mu.Unlock()
	return Result{}, nil, cacheProbe
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
	missing := ceilDiv(int64(resetAfter/time.Microsecond), p.Tick) * p.Refill
	return max(remaining, int((p.Capacity-missing)/p.Unit))
}

// record learns from the store's answer r, arrived at now, to a request
// of cost n under lim sent at sent, caching a deadline when cost n cannot
// be served before it. A deadline already passed when its answer arrives
// (the bucket refills faster than the store answers) is not cached: the
// entry could never deny anything, and callers waiting on probes
// would each wait for two round trips. probe says whether this caller was
// the probe; its waiters are released.
func (c *denyCache) record(subject string, n int, lim Limit, sent, now int64, r Result, probe bool) {
	until := sent + int64(nextServe(r, n))
	if until <= now {
		until = sent // nothing to cache
	}
	if until > sent && r.Policies != nil {
		// The caller owns r.Policies: keep a copy.
		r.Policies = append([]PolicyResult(nil), r.Policies...)
	}
	sh := c.shard(subject)
	sh.mu.Lock()
	d, exists := sh.m[subject]
	if exists && d.n == 0 && sent <= d.decidedAt {
		// Asked before a refund or reset answered: the answer may
		// predate it, and must not deny what the refund gave back.
		sh.mu.Unlock()
		return
	}
	if exists && probe && d.probe != nil {
		close(d.probe)
		d.probe = nil
	}
	switch {
	case until <= sent:
		if exists && d.probe == nil {
			delete(sh.m, subject)
		}
	case exists:
		if d.probe == nil || until > d.until || lim != d.lim {
			d.until, d.n, d.lim, d.res, d.decidedAt = until, n, lim, r, sent
		}
	default:
		if len(sh.m) >= c.per && !sh.sweep(c.per, sent) {
			break
		}
		sh.m[subject] = &denial{until: until, n: n, lim: lim, res: r, decidedAt: sent}
	}
	sh.mu.Unlock()
}

// settle releases a probe whose store call did not answer (degraded).
func (c *denyCache) settle(subject string) {
	sh := c.shard(subject)
	sh.mu.Lock()
	if d, ok := sh.m[subject]; ok && d.probe != nil {
		close(d.probe)
		delete(sh.m, subject)
	}
	sh.mu.Unlock()
}

// sweep drops entries passed at now, at most every 10ms; it reports
// whether the shard has room. The shard is locked.
func (sh *denyShard) sweep(per int, now int64) bool {
	if now-sh.lastSweep > int64(10*time.Millisecond) {
		sh.lastSweep = now
		for k, d := range sh.m {
			if now >= d.until && d.probe == nil {
				delete(sh.m, k)
			}
		}
	}
	return len(sh.m) < per
}

// forget drops subject's denial once a refund or reset has answered at
// now (the limiter's clock), and for ttl (the longest a decision can be
// in flight) ignores the answers to decisions sent before now: a probe
// whose store call ran before the refund would otherwise cache a denial
// of the tokens the refund gave back.
func (c *denyCache) forget(subject string, now, ttl int64) {
	sh := c.shard(subject)
	sh.mu.Lock()
	d, ok := sh.m[subject]
	if ok && d.probe != nil {
		close(d.probe)
	}
	if ok || len(sh.m) < c.per || sh.sweep(c.per, now) {
		sh.m[subject] = &denial{until: now + ttl, decidedAt: now}
	}
	sh.mu.Unlock()
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
	spare := time.Duration(ceilDiv(p.Capacity-int64(n)*p.Unit, p.Refill)*p.Tick) * time.Microsecond
	return resetAfter - spare - time.Duration(p.Tick)*time.Microsecond
}
