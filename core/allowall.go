package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// A decision across keys (AllowAll) starts here. Its checks' buckets
// become the parts of one bucket.Ask per store node (Ask.Across): the
// memory store decides them under every shard lock at once
// (internal/bucket/across.go); a RedisStore sends each node's in one call
// of the batch script, queued as any decision (internal/transport), which
// takes them all or nothing. Across nodes, a node that took when another
// refused gets its parts back (giveBack), and a node that failed leaves
// its checks to their limiters' FailModes.

// Check is one part of a decision across keys (AllowAll): N tokens of
// Key under Limiter's limits (Config.Limit and Config.Extra, or a With
// view's), with its name, denial cache and FailMode.
type Check struct {
	Limiter *Limiter
	Key     string
	N       int // tokens to take; 0 looks without taking (whether one would pass)
}

// AllowAll decides checks together, all or nothing: allowed when every
// check is, each then taking its N; refused, nothing is taken anywhere.
// It returns the binding Result first — the refusing check with the
// longest RetryAfter, else the check with the fewest Remaining for its
// burst — then one Result per check, in order. In a refused call a check
// within its limit says Allowed, with its Remaining untouched. Of more
// than one check, the binding Result's Policies lists every check's
// policies, check by check (as RateLimit-Policy lists them), and it is
// Degraded when any check is. A check that FailOpen allowed blind binds
// only when no other was decided (by the store or FailLocal's bucket),
// so that its Remaining 0 does not stand for a limit it knows nothing of.
//
// Every limiter must use the same store. The checks of one store node
// (every check on a standalone Redis, Sentinel or memory store, one Ring
// shard's, one Cluster node's) are one atomic store call; on a Cluster,
// one call per node, and when a node refuses, the nodes that took get it
// back, exactly once (docs/redis.md, "Decisions across keys"). Checks of
// one bucket (the same key under the same Name) add up their costs.
//
// Each check asks its limiter's denial cache (Config.DenyCacheSize) as
// AllowN does, and teaches it the store's answer: a check known refused
// there refuses the whole with no store call, and the checks not asked
// then say Allowed with only Limit and Name set: nothing is taken from
// them, but what they hold is known only to the store, and asking it
// would spend the round trip the cache saves (a flood on a refused key
// costs none), so their Remaining reads 0.
//
// A check whose N exceeds its burst can never pass: it is refused (the
// whole with it) with RetryAfter past its ResetAfter, not an error. A
// node that cannot decide leaves its checks to their limiters' FailModes
// (Result.Degraded); the whole is allowed only if every check is. The
// decision waits at most the smallest Timeout of the limiters; on a
// Cluster a refused call then waits for its give-backs too (a call per
// node that took, in turn, each within its limiter's Timeout). The error is
// non-nil only for a caller's mistake, naming the check by its index:
// none given, a nil Limiter, an empty Key, N < 0, limiters on different
// stores, or one bucket under two different limits; nothing is then
// taken.
func AllowAll(ctx context.Context, checks ...Check) (Result, []Result, error) {
	var d across
	if err := d.init(checks); err != nil {
		return Result{}, nil, err
	}
	if d.store.remote() {
		if first, res, ok := allowAllFromSlices(ctx, checks); ok { // Config.Borrow: see borrow.go
			return first, res, nil
		}
		if d.cached(ctx) {
			return d.whole(d.res[d.bind], d.res), d.res, nil
		}
		d.remote(ctx)
		first, res := d.results(ctx)
		d.learn(res)
		return d.whole(first, res), res, nil
	}
	o, _ := d.store.call(ctx, d.ask(bucket.OpTake, 0, len(d.parts)))
	d.allowed = o.Allowed
	first, res := d.results(ctx)
	return d.whole(first, res), res, nil
}

// whole is first, the binding Result of res, as AllowAll returns it: of
// several checks, with every check's policies, and Degraded when any
// check is.
func (d *across) whole(first Result, res []Result) Result {
	if len(res) == 1 {
		return first
	}
	n := 0
	for _, r := range res {
		n += max(1, len(r.Policies))
		first.Degraded = first.Degraded || r.Degraded
	}
	ps := d.small.ps[:0]
	if n > len(d.small.ps) {
		ps = make([]PolicyResult, 0, n)
	}
	for _, r := range res {
		if r.Policies != nil {
			ps = append(ps, r.Policies...)
			continue
		}
		ps = append(ps, PolicyResult{Name: r.Name, Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter})
	}
	first.Policies = ps
	return first
}

// Store returns the store l decides on (Config.Store). Limiters whose
// Stores are equal can be checked together (AllowAll): an adapter that
// combines limiters compares them when it is built.
func (l *Limiter) Store() Store { return l.base.store }

// checkError is a caller's mistake in one check of AllowAll.
type checkError struct {
	i   int
	err error
}

func (e *checkError) Error() string {
	return fmt.Sprintf("core: check %d: %s", e.i, strings.TrimPrefix(e.err.Error(), "core: "))
}

func (e *checkError) Unwrap() error { return e.err }

// across is one AllowAll: its checks, and their buckets as the parts of
// one decision, grouped by store node.
type across struct {
	checks []Check
	subj   []string     // per check: its key as the store keys it
	sets   []*policySet // per check: its limits
	at     []int        // per check and policy, in order: the part of its bucket
	first  []int        // per check: its policies' start in at
	store  storeCalls

	parts []bucket.Part // per bucket: its subject and cost
	pols  []bucket.Policy
	each  []bucket.Outcome
	units []int             // the start of each node's parts, then len(parts)
	seen  map[bucketKey]int // the parts by bucket, once they are many (find)

	allowed bool
	failed  []error // per node, when remote: why it could not decide
	took    []bool  // per node, when remote: its parts were taken
	backs   []bool  // per node: its parts were given back (each holds the state after)
	local   []bool  // per check: FailLocal's bucket decided it (failed)
	res     []Result
	bind    int // the binding check, when cached answered

	// The denial caches: per check, when its limiter keeps one and its
	// cost is its own (N ≥ 1, within its burst, its buckets in no other
	// check), when it looked (limiter's clock), and whether as the probe.
	asked []int64 // 0: not asked
	probe []bool

	// Room for four buckets of up to four checks, on one or two nodes:
	// one allocation for them all.
	small struct {
		subj   [4]string
		sets   [4]*policySet
		first  [5]int
		at     [4]int
		parts  [4]bucket.Part
		pols   [4]bucket.Policy
		each   [4]bucket.Outcome
		units  [3]int
		failed [2]error
		took   [2]bool
		backs  [2]bool
		res    [4]Result
		ps     [4]PolicyResult
		asked  [4]int64
		probe  [4]bool
	}
}

// init checks the checks and lays out their parts; the error names the
// check at fault.
func (d *across) init(checks []Check) error {
	if len(checks) == 0 {
		return fmt.Errorf("%w: AllowAll needs at least one check", ErrInvalidConfig)
	}
	k := len(checks)
	d.checks = checks
	d.subj, d.sets, d.first = room(d.small.subj[:], k), room(d.small.sets[:], k), room(d.small.first[:], k+1)
	d.at, d.parts, d.pols = d.small.at[:0], d.small.parts[:0], d.small.pols[:0]
	for i, c := range checks {
		if err := d.lay(i, c); err != nil {
			return err
		}
	}
	d.first[k] = len(d.at)
	d.each = room(d.small.each[:], len(d.parts))
	d.units = append(d.small.units[:0], 0, len(d.parts))
	return nil
}

// room returns n elements: small's first n, or new ones past its length.
func room[T any](small []T, n int) []T {
	if n <= len(small) {
		return small[:n]
	}
	return make([]T, n)
}

// lay checks check i and lays out its buckets, one part per policy.
func (d *across) lay(i int, c Check) error {
	switch {
	case c.Limiter == nil:
		return &checkError{i, fmt.Errorf("%w: nil Limiter", ErrInvalidConfig)}
	case c.Key == "":
		return &checkError{i, ErrEmptyKey}
	case c.N < 0:
		return &checkError{i, fmt.Errorf("%w (got %d; 0 looks without taking)", ErrInvalidCost, c.N)}
	}
	l, set := c.Limiter.base, c.Limiter.set
	if i == 0 {
		d.store = l.store
	} else if l.store != d.store {
		return &checkError{i, fmt.Errorf("%w: its limiter uses another store than check 0's", ErrInvalidConfig)}
	}
	if l.denials != nil && c.N >= 1 && c.N <= set.minCap {
		if d.asked == nil {
			d.asked, d.probe = room(d.small.asked[:], len(d.checks)), room(d.small.probe[:], len(d.checks))
		}
		d.asked[i] = -1 // asks its cache, unless it shares a bucket
	}
	d.sets[i], d.subj[i], d.first[i] = set, l.store.subject(c.Key), len(d.at)
	for j := range set.policies {
		if err := d.layPolicy(i, &set.policies[j]); err != nil {
			return err
		}
	}
	return nil
}

// layPolicy lays out check i's bucket under policy p: a part of its own,
// or, when an earlier check has that bucket (the same subject and policy
// name), that part, the costs added up.
func (d *across) layPolicy(i int, p *bucket.Policy) error {
	n := min(d.checks[i].N, int(p.Capacity/p.Unit)+1) // above the burst: never passes
	at, ok := d.find(d.subj[i], p.Name)
	if !ok {
		if d.seen != nil {
			d.seen[bucketKey{d.subj[i], p.Name}] = len(d.parts)
		}
		d.at = append(d.at, len(d.parts))
		d.parts = append(d.parts, bucket.Part{Subj: d.subj[i], N: n})
		d.pols = append(d.pols, *p)
		return nil
	}
	if d.pols[at].Desc() != p.Desc() {
		return &checkError{i, fmt.Errorf("%w: key %q under policy %q is also in an earlier check, under another limit", ErrInvalidConfig, d.checks[i].Key, p.Name)}
	}
	d.shared(i, at)
	d.parts[at].N = min(d.parts[at].N+n, int(p.Capacity/p.Unit)+1)
	d.at = append(d.at, at)
	return nil
}

// bucketKey names a bucket: its subject and its policy's name.
type bucketKey struct{ subj, name string }

// find returns the part of the bucket of subj under policy name, if laid
// out: through the parts while they are few, past that through seen.
func (d *across) find(subj, name string) (int, bool) {
	if d.seen == nil && len(d.parts) <= 16 {
		for j := range d.parts {
			if d.parts[j].Subj == subj && d.pols[j].Name == name {
				return j, true
			}
		}
		return -1, false
	}
	if d.seen == nil {
		d.seen = make(map[bucketKey]int, 2*len(d.parts))
		for j := range d.parts {
			d.seen[bucketKey{d.parts[j].Subj, d.pols[j].Name}] = j
		}
	}
	at, ok := d.seen[bucketKey{subj, name}]
	return at, ok
}

// shared stops check i, and every earlier check with part at, from
// asking their denial caches: a cost that adds up with another check's
// is not the one their cache knows.
func (d *across) shared(i, at int) {
	if d.asked == nil {
		return
	}
	d.asked[i] = 0
	for c := range i {
		if slices.Contains(d.at[d.first[c]:d.first[c+1]], at) {
			d.asked[c] = 0
		}
	}
}

// cached looks the checks up in their limiters' denial caches: when one
// is denied there, the whole is refused at once, with no store call (a
// flood on one key costs no round trips, as for AllowN). The checks it
// did not ask then say Allowed, their Limit and Name set, Remaining 0.
// It reports whether it answered; else a check that is its key's probe
// will tell its cache the store's answer (learn).
func (d *across) cached(ctx context.Context) bool {
	if d.asked == nil {
		return false
	}
	var denied []int
	for c, a := range d.asked {
		if a != -1 {
			continue
		}
		l := d.checks[c].Limiter.base
		now := l.clock()
		r, _, _, state := l.denials.lookup(d.cacheAsk(c), now, now)
		switch state {
		case cacheDeny:
			if d.res == nil {
				d.res = d.resultSlice()
			}
			d.res[c] = r
			denied = append(denied, c)
		case cacheProbe:
			d.probe[c] = true
		}
		d.asked[c] = now
	}
	if denied == nil {
		return false
	}
	d.bind = denied[0]
	for c := range d.checks {
		l := d.checks[c].Limiter.base
		if slices.Contains(denied, c) {
			if d.res[c].RetryAfter > d.res[d.bind].RetryAfter {
				d.bind = c
			}
			if l.observer != nil {
				l.observe(ctx, bucket.OpTake, DecisionEvent{Policy: d.sets[c].name(), Cached: true})
			}
			continue
		}
		if d.probe[c] {
			l.denials.settle(d.cacheAsk(c), d.asked[c])
		}
		d.res[c] = Result{Allowed: true, Limit: d.sets[c].limits[0], Name: d.sets[c].policies[0].Name}
		if l.observer != nil {
			l.observe(ctx, bucket.OpTake, DecisionEvent{Policy: d.sets[c].name()})
		}
	}
	return true
}

// cacheAsk is check c as its denial cache keys it.
func (d *across) cacheAsk(c int) cacheAsk {
	return cacheAsk{subject: d.subj[c], name: d.sets[c].policies[0].Name, n: d.checks[c].N, lim: d.sets[c].limits[0]}
}

// learn tells the denial caches asked (cached) what the store answered.
func (d *across) learn(res []Result) {
	if d.asked == nil {
		return
	}
	for c, at := range d.asked {
		if at <= 0 {
			continue
		}
		l := d.checks[c].Limiter.base
		if d.failed[d.nodeOf(c)] != nil {
			if d.probe[c] {
				l.denials.settle(d.cacheAsk(c), at)
			}
			continue
		}
		l.denials.record(d.cacheAsk(c), at, l.clock(), res[c], d.probe[c])
	}
}

// ask is the Ask of parts [from, to), one node's.
func (d *across) ask(op, from, to int) bucket.Ask {
	parts := d.parts[from:to]
	return bucket.Ask{Op: op, Subj: parts[0].Subj, Policies: d.pols[from:to], Each: d.each[from:to], Across: parts}
}

// group orders the parts by the store node deciding them (see
// transport.Store.Unit), each node's together, and sets units.
func (d *across) group(unit func(string) string) {
	names := make([]string, len(d.parts))
	for i := range d.parts {
		names[i] = unit(d.parts[i].Subj)
	}
	order := make([]int, len(d.parts)) // new position → old
	for i := range order {
		order[i] = i
	}
	rank := func(s string) int { return slices.Index(names, s) }
	slices.SortStableFunc(order, func(a, b int) int { return rank(names[a]) - rank(names[b]) })
	moved := make([]int, len(order)) // old → new
	parts, pols := make([]bucket.Part, len(order)), make([]bucket.Policy, len(order))
	d.units = d.units[:0]
	for i, o := range order {
		moved[o] = i
		parts[i], pols[i] = d.parts[o], d.pols[o]
		if i == 0 || names[o] != names[order[i-1]] {
			d.units = append(d.units, i)
		}
	}
	d.units = append(d.units, len(order))
	d.parts, d.pols = parts, pols
	for i, at := range d.at {
		d.at[i] = moved[at]
	}
}

// remote decides d on a store outside the process: one guarded call per
// node, all at once; then, if the whole is refused, the nodes that took
// give it back.
func (d *across) remote(ctx context.Context) {
	if d.store.breakers().node != nil { // a store of several nodes
		d.group(d.store.unit)
	}
	nu := len(d.units) - 1
	d.failed, d.took, d.backs = room(d.small.failed[:], nu), room(d.small.took[:], nu), room(d.small.backs[:], nu)
	start := time.Now()
	timeout := d.checks[0].Limiter.base.timeout
	for _, c := range d.checks[1:] {
		timeout = min(timeout, c.Limiter.base.timeout)
	}
	deadline := start.Add(timeout)
	ctx = withoutCancel(ctx)
	if nu == 1 {
		d.decideNode(ctx, 0, deadline)
	} else {
		d.decideNodes(ctx, deadline)
	}
	d.allowed = true
	for u := range nu {
		d.allowed = d.allowed && d.failed[u] == nil && d.each[d.units[u]].Allowed
	}
	if slices.ContainsFunc(d.failed, func(err error) bool { return err != nil }) {
		d.local = make([]bool, len(d.checks))
		d.allowed = d.degrade(ctx, start)
	}
	if d.allowed {
		return
	}
	for u := range nu {
		if d.took[u] {
			d.giveBack(ctx, u)
		}
	}
}

// decideNodes asks every node at once, each on a goroutine but the
// first, by deadline.
func (d *across) decideNodes(ctx context.Context, deadline time.Time) {
	var wg sync.WaitGroup
	for u := 1; u < len(d.units)-1; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.decideNode(ctx, u, deadline)
		}()
	}
	d.decideNode(ctx, 0, deadline)
	wg.Wait()
}

// decideNode asks node u's parts through the guard of the first check on
// it, by deadline.
func (d *across) decideNode(ctx context.Context, u int, deadline time.Time) {
	from, to := d.units[u], d.units[u+1]
	for i := from; i < to; i++ {
		d.ownerOf(i).base.beat() // FailLocal's instance count rides the call
	}
	g := &d.ownerOf(from).base.guard
	var o bucket.Outcome
	_, err := g.call(ctx, d.parts[from].Subj, deadline, func(ctx context.Context) (err error) {
		a := d.ask(bucket.OpTake, from, to)
		a.Deadline, a.Bound = deadline, g.bound
		o, err = d.store.call(ctx, a)
		return err
	})
	d.took[u] = err == nil && o.Allowed
	d.failed[u] = err
}

// ownerOf returns the limiter of the first check with a part at i.
func (d *across) ownerOf(i int) *Limiter {
	for c := range d.checks {
		if slices.Contains(d.at[d.first[c]:d.first[c+1]], i) {
			return d.checks[c].Limiter
		}
	}
	return d.checks[0].Limiter
}

// nodeOf returns the node of check c's parts (a check's buckets share
// its subject, so its node).
func (d *across) nodeOf(c int) int {
	i := d.at[d.first[c]]
	u := 0
	for u+1 < len(d.units)-1 && d.units[u+1] <= i {
		u++
	}
	return u
}

// degrade decides by their FailModes the checks of the nodes that failed,
// and reports whether the whole is then allowed.
func (d *across) degrade(ctx context.Context, start time.Time) bool {
	d.res = d.resultSlice()
	allowed := true
	for c := range d.checks {
		u := d.nodeOf(c)
		if d.failed[u] == nil {
			allowed = allowed && d.each[d.units[u]].Allowed
			continue
		}
		l, n := d.checks[c].Limiter.base, d.checks[c].N
		set := d.sets[c]
		now := l.clock()
		l.report.degradedBy("", d.failed[u], now)
		var r Result
		if n > set.minCap {
			r = Result{Limit: set.limits[0], Name: set.policies[0].Name, RetryAfter: set.limits[0].Window(), Degraded: true}
		} else {
			op := bucket.OpTake
			if n == 0 {
				op, n = bucket.OpPeek, 1
			}
			r = l.fallback.decide(l.breakers.forKey(d.subj[c]), now, op, d.subj[c], n, set)
			d.local[c] = r.Fallback && op == bucket.OpTake && r.Allowed
		}
		if l.observer != nil {
			l.decided(ctx, DecisionEvent{Policy: set.name(), Allowed: r.Allowed, Degraded: true, Err: d.failed[u]}, start)
		}
		d.res[c] = r
		allowed = allowed && r.Allowed
	}
	if !allowed {
		for c, took := range d.local {
			if took {
				l := d.checks[c].Limiter.base
				l.fallback.decide(l.breakers.forKey(d.subj[c]), l.clock(), bucket.OpRefund, d.subj[c], d.checks[c].N, d.sets[c])
			}
		}
	}
	return allowed
}

// giveBack returns what node u took, in one guarded call: exactly once,
// as every call (the script's replay record answers a re-sent call). A
// give-back that fails leaves the tokens taken: the limit under-admits
// for a while, never over.
func (d *across) giveBack(ctx context.Context, u int) {
	from, to := d.units[u], d.units[u+1]
	var parts []bucket.Part
	var pols []bucket.Policy
	var at []int
	for i := from; i < to; i++ {
		if d.parts[i].N > 0 {
			parts, pols, at = append(parts, d.parts[i]), append(pols, d.pols[i]), append(at, i)
		}
	}
	if len(parts) == 0 {
		return
	}
	l := d.ownerOf(from).base
	each := make([]bucket.Outcome, len(parts))
	deadline := time.Now().Add(l.timeout)
	_, err := l.call(ctx, parts[0].Subj, deadline, func(ctx context.Context) error {
		_, err := l.store.call(ctx, bucket.Ask{Op: bucket.OpRefund, Subj: parts[0].Subj, Policies: pols, Each: each, Across: parts, Deadline: deadline, Bound: l.bound})
		return err
	})
	if err != nil {
		return
	}
	for k, i := range at {
		d.each[i] = each[k]
	}
	d.backs[u] = true
}

// results builds the Results: the binding one, then one per check.
func (d *across) results(ctx context.Context) (Result, []Result) {
	res := d.res
	if res == nil {
		res = d.resultSlice()
	}
	bind := -1
	for c := range d.checks {
		if d.failed != nil && d.failed[d.nodeOf(c)] != nil {
			// Decided by FailMode (degrade).
		} else {
			res[c] = d.result(c)
			if l := d.checks[c].Limiter.base; l.observer != nil {
				l.observe(ctx, bucket.OpTake, DecisionEvent{Policy: d.sets[c].name(), Allowed: d.allowed})
			}
		}
		if !d.allowed && res[c].Allowed {
			continue
		}
		if bind < 0 || binds(res[c], res[bind]) {
			bind = c
		}
	}
	if bind < 0 { // refused, yet every check within its limit: a failed give-back's
		bind = 0
	}
	return res[bind], res
}

// resultSlice returns room for one Result per check.
func (d *across) resultSlice() []Result { return room(d.small.res[:], len(d.checks)) }

// binds reports whether r binds rather than best: refused, the longer
// RetryAfter; allowed, a check decided over a blind one (FailOpen's
// Remaining 0 says nothing of its limit), then the fewer Remaining for
// its burst.
func binds(r, best Result) bool {
	if r.Allowed != best.Allowed {
		return !r.Allowed
	}
	if !r.Allowed {
		return r.RetryAfter > best.RetryAfter
	}
	if blind(r) != blind(best) {
		return blind(best)
	}
	return float64(r.Remaining)/float64(r.Limit.Capacity()) < float64(best.Remaining)/float64(best.Limit.Capacity())
}

// blind reports an allowed r that FailMode gave without deciding (FailOpen).
func blind(r Result) bool { return r.Degraded && !r.Fallback }

// result is check c's Result from the store's outcomes: in a refused
// whole, within its limit unless a policy says how long to wait.
func (d *across) result(c int) Result {
	set, at := d.sets[c], d.at[d.first[c]:d.first[c+1]]
	u := d.nodeOf(c)
	allowed := d.allowed
	if !allowed {
		allowed = !slices.ContainsFunc(at, func(i int) bool { return d.each[i].RetryAfter > 0 })
	}
	var each []bucket.Outcome
	if len(at) > 1 {
		each = make([]bucket.Outcome, len(at))
	}
	var best bucket.Outcome
	for j, i := range at {
		o := d.each[i]
		o.Policy, o.Allowed = j, allowed
		if !d.allowed && d.took != nil && d.took[u] && !d.backs[u] {
			// Taken, and not given back (the give-back failed): what it
			// held before.
			o.Remaining = min(o.Remaining+int64(d.parts[i].N), d.pols[i].Capacity/d.pols[i].Unit)
		}
		if each != nil {
			each[j] = o
		}
		if j == 0 || bucket.Binds(o, best) {
			best = o
		}
	}
	return resultOf(best, each, set)
}
