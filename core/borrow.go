package core

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Hot allowed keys decided in process (Config.Borrow, DESIGN §14).
//
// A key this limiter decides at least once per Borrow borrows a slice of
// its buckets in one store call (bucket.OpLend): k tokens of every
// policy, all or nothing, k the fewest whole tokens any policy refills in
// Borrow and at most half the smallest burst. The store keeps them out
// of its refill until the loan ends (see bucket.Lender, the model and its
// proof), so deciding from the slice never admits beyond the bucket's
// envelope on any instance. Each decision from the slice takes n of k,
// until the slice is spent or its loan ends for this instance: Borrow
// after the borrow was sent, on the monotonic clock, never after the
// store's own end. Then the next decision borrows again, giving back
// what is left of the last slice in the same call; a key that cooled
// down keeps its slice until its loan ends (the store drops what is
// unspent then): the under-use, at most the tokens on loan.
//
// Near empty, the store lends nothing (no bucket can spare k): the
// decision, and the key's decisions for the next Borrow, go to the store
// one by one, as without borrowing — denials, RetryAfter and the denial
// cache exactly as they are. Only takes under the limiter's own limits
// borrow; an AllowAll check takes from a slice in hand (see
// allowAllFromSlices). A view of another limit (With, AllowLimit), Peek,
// Refund, ReserveN, WaitN and Charge ask the store, which counts the
// tokens on loan as taken.

// maxSlices bounds the keys a limiter tracks for borrowing: a key past
// it is decided by the store, as without Borrow.
const maxSlices = 4096

// sliceTable is a Limiter's slice table.
type sliceTable struct {
	term time.Duration // Config.Borrow
	k    int64         // tokens per slice, of every policy

	mu     sync.Mutex
	keys   map[string]*slice // by subject as the store keys it
	nextID uint64            // loan ids: a random start, then one up
	swept  int64             // the last sweep of a full table
}

// slice is one key's state: its last decision and its loan, if any.
type slice struct {
	last  int64   // its last decision (the limiter's clock, ns)
	id    uint64  // the loan out; 0: none usable
	end   int64   // the loan's end for this instance: sent + term
	spent int64   // tokens taken from the slice, of every policy
	level []int64 // per policy: tokens in the bucket at the borrow, the slice with them
	busy  bool    // a borrow is in flight
	quiet int64   // no borrow before: the store lent nothing, or was not asked
}

// newSlices returns the slice table of a limiter borrowing for term
// under set, nil when no slice of at least two tokens fits every policy
// (a slice of one saves no call).
func newSlices(term time.Duration, set *policySet) *sliceTable {
	if term <= 0 {
		return nil
	}
	k := int64(set.minCap / 2)
	for i := range set.policies {
		p := &set.policies[i]
		k = min(k, bucket.SliceUnits(p, term.Microseconds())/p.Unit)
	}
	if k < 2 {
		return nil
	}
	return &sliceTable{term: term, k: k, keys: make(map[string]*slice), nextID: rand.Uint64() >> 1}
}

// fromSlice decides a, a take of a.N tokens of a.Subj (as the store keys it)
// under l's own limits from the key's slice, borrowing one when the key
// is hot and has none; ok is false when the store decides the take, as
// without borrowing.
func (l *Limiter) fromSlice(ctx context.Context, a bucket.Ask, set *policySet) (r Result, ok bool) {
	s, n := l.borrow, int64(a.N)
	now, term := l.clock(), int64(l.borrow.term)
	s.mu.Lock()
	e := s.keys[a.Subj]
	if e == nil {
		s.track(a.Subj, now)
		s.mu.Unlock()
		return r, false
	}
	hot := now-e.last < term
	e.last = now
	if e.id != 0 && now < e.end && e.spent+n <= s.k {
		e.spent += n
		r = s.result(e, set)
		s.mu.Unlock()
		if l.observer != nil {
			l.decided(ctx, DecisionEvent{Policy: set.name(), Allowed: true, Borrowed: true}, time.Time{})
		}
		return r, true
	}
	if !hot || e.busy || now < e.quiet || n > s.k {
		s.mu.Unlock()
		return r, false
	}
	return l.borrowFor(ctx, a, set, e) // unlocks s.mu
}

// track starts keeping key, first decided at now, unless the table is
// full of keys still hot. s.mu is held.
func (s *sliceTable) track(key string, now int64) {
	if len(s.keys) >= maxSlices && now-s.swept >= int64(s.term) {
		s.sweep(now) // at most once a term: a table full of fresh keys stays full
	}
	if len(s.keys) < maxSlices {
		s.keys[key] = &slice{last: now}
	}
}

// borrowFor decides a from a slice of e's key borrowed for it, giving
// back what is left of e's last slice in the same call; ok is false when
// the store lent nothing (it decides the take). s.mu is held, and
// unlocked on return.
func (l *Limiter) borrowFor(ctx context.Context, a bucket.Ask, set *policySet, e *slice) (r Result, ok bool) {
	s, term := l.borrow, int64(l.borrow.term)
	back := loanBack{id: e.id, unspent: s.k - e.spent}
	if back.id == 0 {
		back.unspent = 0
	}
	if s.nextID++; s.nextID == 0 {
		s.nextID++
	}
	id := s.nextID
	e.id, e.busy = 0, true
	s.mu.Unlock()

	start, sent := time.Now(), l.clock()
	o, each, br, err := l.lend(ctx, a.Subj, set, back, id, start)
	s.mu.Lock()
	e.busy = false
	switch {
	case err != nil && asked(err):
		// The reply is lost, not the loan: the store may have lent it.
		// The key's next decision borrows again, returning it whole (a
		// loan the store never recorded gives nothing back), rather than
		// leave it unused until its end and send the key's takes to the
		// store one by one meanwhile, a burst of calls on a slow store.
		e.id, e.end, e.spent = id, sent, 0
	case err != nil || !o.Allowed:
		// Nothing lent, or not asked (the breaker is open, or the store
		// overloaded): the store decides the key's takes one by one for a
		// while, exactly near empty, and probing the breaker as ever.
		e.quiet = sent + term
	}
	if err != nil || !o.Allowed {
		s.mu.Unlock()
		if err != nil {
			if !asked(err) {
				start = time.Time{}
			}
			return l.degrade(ctx, br, a, set, err, start), true
		}
		return r, false
	}
	e.id, e.end, e.spent = id, sent+term, int64(a.N)
	if e.level == nil {
		e.level = make([]int64, len(each))
	}
	for i := range each {
		e.level[i] = each[i].Remaining + s.k
	}
	r = s.result(e, set)
	s.mu.Unlock()
	if l.observer != nil {
		l.decided(ctx, DecisionEvent{Policy: set.name(), Allowed: true, Borrowed: true, Lent: int(s.k), Returned: int(back.unspent)}, start)
	}
	return r, true
}

// loanBack is a loan a borrow gives back: its id (0: none) and its
// tokens unspent, of every policy.
type loanBack struct {
	id      uint64
	unspent int64
}

// lend asks the store, through the guard, to end loan back and to lend
// loan id for the key's policies, the call bounded from start.
func (l *Limiter) lend(ctx context.Context, key string, set *policySet, back loanBack, id uint64, start time.Time) (o bucket.Outcome, each []bucket.Outcome, br *breaker, err error) {
	l.beat()
	s, m := l.borrow, len(set.policies)
	ln := &bucket.Lend{Return: back.id, ID: id, Back: make([]int64, m), Want: make([]int64, m)}
	for i := range m {
		ln.Back[i], ln.Want[i] = back.unspent, s.k
	}
	each = make([]bucket.Outcome, m)
	deadline := start.Add(l.timeout)
	br, err = l.call(ctx, key, deadline, func(ctx context.Context) (err error) {
		o, err = l.store.call(ctx, bucket.Ask{Op: bucket.WithArg(bucket.OpLend, s.term.Microseconds()), Subj: key, N: 1,
			Policies: set.policies, Each: each, Deadline: deadline, Bound: l.bound, Lend: ln})
		return err
	})
	return o, each, br, err
}

// result is an allowed take from slice e under set: Remaining is the
// bucket's level at the borrow less the slice spent since (what the
// instances borrowing besides it took is not seen until its next
// borrow), ResetAfter how long that many tokens take to refill.
func (s *sliceTable) result(e *slice, set *policySet) Result {
	best := 0
	for i := range e.level {
		if e.level[i] < e.level[best] {
			best = i
		}
	}
	rem := func(i int) (int, time.Duration) {
		p := &set.policies[i]
		left := max(0, e.level[i]-e.spent)
		missing := p.Capacity - left*p.Unit
		return int(left), time.Duration(bucket.CeilDiv(missing, p.Refill)*p.Tick) * time.Microsecond
	}
	r := Result{Allowed: true, Limit: set.limits[best], Name: set.policies[best].Name}
	r.Remaining, r.ResetAfter = rem(best)
	if len(set.policies) > 1 {
		r.Policies = make([]PolicyResult, len(set.policies))
		for i := range set.policies {
			pr := &r.Policies[i]
			pr.Name, pr.Limit = set.policies[i].Name, set.limits[i]
			pr.Remaining, pr.ResetAfter = rem(i)
		}
	}
	return r
}

// sweep forgets the keys that cooled down: not decided within a term,
// with no loan still usable and no borrow in flight. s.mu is held.
func (s *sliceTable) sweep(now int64) {
	s.swept = now
	for k, e := range s.keys {
		if !e.busy && now-e.last >= int64(s.term) && (e.id == 0 || now >= e.end) {
			delete(s.keys, k)
		}
	}
}

// drop forgets key's slice (Reset: its bucket and loans are gone).
func (s *sliceTable) drop(key string) {
	s.mu.Lock()
	delete(s.keys, key)
	s.mu.Unlock()
}

// takeHeld takes n tokens of key from the slice in hand, if it has them
// and its loan has not ended (no borrowing), and returns the Result and
// the loan's id.
func (s *sliceTable) takeHeld(now int64, key string, n int64, set *policySet) (Result, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil || e.id == 0 || now >= e.end || e.spent+n > s.k {
		return Result{}, 0, false
	}
	e.last = now
	e.spent += n
	return s.result(e, set), e.id, true
}

// untake gives n tokens back to key's slice, if it is still loan id.
func (s *sliceTable) untake(key string, id uint64, n int64) {
	s.mu.Lock()
	if e := s.keys[key]; e != nil && e.id == id {
		e.spent -= n
	}
	s.mu.Unlock()
}

// allowAllFromSlices is AllowAll when some checks can take from the
// slices in hand of their limiters (Config.Borrow): they take there, in
// process, and the others are decided by the store as usual, in one
// AllowAll; when that refuses, the slices get their tokens back, so the
// whole stays all or nothing. ok is false when no check could (nor when
// a caller's mistake is for AllowAll to report): AllowAll decides them
// all.
func allowAllFromSlices(ctx context.Context, checks []Check) (first Result, res []Result, ok bool) {
	hs, ok := borrowers(checks)
	if !ok {
		return Result{}, nil, false
	}
	res = make([]Result, len(checks))
	took := takeHeldAll(checks, hs, res)
	if len(took) == 0 {
		return Result{}, nil, false
	}
	allowed := true
	if len(took) < len(checks) {
		if allowed, ok = allowRest(ctx, checks, res); !ok || !allowed {
			untakeAll(checks, took, res)
		}
		if !ok {
			return Result{}, nil, false
		}
	}
	bind := -1
	for i := range res {
		if !allowed && res[i].Allowed {
			continue
		}
		if bind < 0 || binds(res[i], res[bind]) {
			bind = i
		}
	}
	for _, h := range took {
		if l := checks[h.i].Limiter.base; l.observer != nil {
			l.decided(ctx, DecisionEvent{Policy: checks[h.i].Limiter.set.name(), Allowed: allowed, Borrowed: true}, time.Time{})
		}
	}
	var d across
	return d.whole(res[max(bind, 0)], res), res, true
}

// heldCheck is a check that may take from its limiter's slice: its index, its
// key as the store keys it, and the loan it took from (0: none yet).
type heldCheck struct {
	i   int
	key string
	id  uint64
}

// borrowers returns the checks whose limiters borrow, taking under their
// own limits; ok is false when there are none, or when a check is a
// caller's mistake or on another store (for AllowAll to report).
func borrowers(checks []Check) (hs []heldCheck, ok bool) {
	for i, c := range checks {
		if c.Limiter == nil || c.Key == "" || c.N < 0 || c.Limiter.base.store != checks[0].Limiter.base.store {
			return nil, false
		}
		if b := c.Limiter.base; b.borrow != nil && c.N > 0 && c.Limiter.set == b.set {
			hs = append(hs, heldCheck{i: i, key: b.store.subject(c.Key)})
		}
	}
	return hs, len(hs) > 0
}

// takeHeldAll takes each of hs's checks from its slice in hand, if it
// has one that holds it, its Result in res; it returns those that took.
func takeHeldAll(checks []Check, hs []heldCheck, res []Result) []heldCheck {
	took := hs[:0]
	for _, h := range hs {
		c := checks[h.i]
		b := c.Limiter.base
		if r, id, ok := b.borrow.takeHeld(b.clock(), h.key, int64(c.N), c.Limiter.set); ok {
			res[h.i], h.id = r, id
			took = append(took, h)
		}
	}
	return took
}

// allowRest decides, in one AllowAll, the checks that took from no slice
// (their Result in res still zero), their Results in res; ok is false
// when AllowAll returned an error.
func allowRest(ctx context.Context, checks []Check, res []Result) (allowed, ok bool) {
	var rest []Check
	var at []int
	for i, c := range checks {
		if res[i].Limit.Rate == 0 {
			rest, at = append(rest, c), append(at, i)
		}
	}
	f, rr, err := AllowAll(ctx, rest...)
	if err != nil {
		return false, false
	}
	for k, i := range at {
		res[i] = rr[k]
	}
	return f.Allowed, true
}

// untakeAll gives the checks that took from their slices their tokens back.
func untakeAll(checks []Check, took []heldCheck, res []Result) {
	for _, h := range took {
		c := checks[h.i]
		c.Limiter.base.borrow.untake(h.key, h.id, int64(c.N))
		res[h.i].Remaining += c.N // untouched: within its limit
	}
}
