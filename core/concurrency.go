package core

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// ConcurrencyConfig configures a Concurrency. Store, Name, Max and
// FailMode are required; every other field has the default its comment
// gives for its zero value.
type ConcurrencyConfig struct {
	// Store keeps the leases: NewRedisStore to share the limit across
	// instances, NewMemoryStore for one process.
	Store Store
	// Name namespaces the leases in the store; required, since two
	// Concurrency values share slots exactly when they have the same Name
	// on the same store (every instance of an app, on purpose). The rules
	// of Config.Name apply.
	Name string
	// Max is the number of leases (requests in flight) a key may hold at
	// once, across every instance. At least 1.
	Max int
	// Lease is how long a slot stays held without renewal: a holder that
	// crashed, or lost its store, gives its slot back after at most Lease.
	// The middleware renews while its handler runs (Lease.KeepAlive), so a
	// long request keeps its slot. At least 3 × Timeout. Default 15s.
	Lease time.Duration
	// FailMode is what happens when the store cannot answer an acquire:
	// FailOpen admits with no slot held, FailClosed refuses (HTTP 503),
	// FailLocal admits up to Max / Instances leases per key (at least 1)
	// held in this process, and only while the store cannot answer (see
	// KeepAlive). Required.
	FailMode FailMode
	// Timeout bounds what a caller waits for each store call (acquire,
	// release, a renewal chunk) from its start, whatever the Redis
	// client's own timeouts and retries; at least 1ms. The caller's
	// context gives its values, never its cancellation. Default 50ms.
	Timeout time.Duration
	// Instances is the number of app instances sharing the limit.
	// Required with FailLocal; ignored otherwise.
	Instances int
	// Rate, if set, is a rate limit decided together with every acquire,
	// for the same key and in the same atomic store call: all or nothing,
	// so a refused slot takes no token and refused tokens hold no slot
	// ("100 a minute and at most 2 at once", one round trip). Each acquire
	// costs one token. Rate must use the same Store and names of its own;
	// its FailMode decides its part when the store cannot answer. The
	// call is the Concurrency's: bounded by its Timeout, through the
	// node's breaker (Rate's denial cache is not asked). See Acquire for the
	// Result.
	Rate *Limiter
	// BreakerFailures, BreakerCooldown, MaxInFlight and Logger are
	// Config's, with the same meaning and defaults: a Concurrency reaches
	// its store through the same guard as a Limiter (the store's breaker
	// per node, shared with the store's other limiters, the bound on calls running in the store, the throttled log
	// line naming Name). FailLocal's leases need no bound of their own:
	// at most Max / Instances per key, each ending within Lease.
	BreakerFailures int
	BreakerCooldown time.Duration
	MaxInFlight     int
	Logger          *slog.Logger
	// Observer, if set, sees every acquire the slots decided as a
	// Decision (Policy is Name; Allowed: a slot was granted; Err why a
	// degraded one was) and every breaker change; a metrics.Collector
	// counts them as it counts a Limiter's decisions. An Observer that is
	// also a LeaseObserver sees the leases held, renewed and expired. A
	// release or renewal the store could not make (the lease then ends by
	// itself within Lease) is logged, and Release returns its error.
	Observer Observer
}

// guardConfig is what cfg says of the Concurrency's guard.
func (cfg *ConcurrencyConfig) guardConfig() guardConfig {
	return guardConfig{store: cfg.Store, name: cfg.Name, mode: cfg.FailMode, timeout: cfg.Timeout,
		failures: cfg.BreakerFailures, cooldown: cfg.BreakerCooldown, maxInFlight: cfg.MaxInFlight,
		instances: cfg.Instances, observer: cfg.Observer, logger: cfg.Logger}
}

// defaultLease is ConcurrencyConfig.Lease's default.
const defaultLease = 15 * time.Second

// Concurrency limits the requests per key in flight at once: at most Max
// leases per key, across every instance sharing the store (Stripe's
// concurrent-requests limiter, GitHub's secondary limit). Each lease is a
// member of the key's set in the store with a deadline on the store's
// clock; a lease that is neither released nor renewed ends at its
// deadline, so a crashed instance never holds slots for longer than Lease.
//
// It reaches the store through the same guard as a Limiter: the same
// breakers, bound, failure rule, FailMode fallback and report (the
// Observer, one log line per interval naming Name).
//
// On a RedisStore, an acquire is one script call and a release one
// command. A key has at most one acquire call in flight per Concurrency:
// the acquires of a key arriving while its call is in flight leave
// together in the next, one script call deciding them in order, each as
// exactly as alone (a flood on one key costs the store one call at a
// time, and each caller still waits at most Timeout). Renewals of every
// lease kept alive by one Concurrency leave together every Lease/3, in
// chunks of at most 500 leases, each chunk one call per Redis node (one
// per key on a Cluster or Ring) bounded by Timeout on its own, not one
// call per request. A refused acquire adds no lease (it removes the
// leases past their deadline it finds). Every acquire asks the store: a
// slot can free at any moment on any instance, so no refusal is kept in
// this process.
//
// A Concurrency is safe for concurrent use; make one per limit at startup
// and share it.
type Concurrency struct {
	guard                            // how it reaches the store (see guard)
	name       string                // ConcurrencyConfig.Name
	max        int                   // ConcurrencyConfig.Max
	lease      time.Duration         // ConcurrencyConfig.Lease
	limit      Limit                 // Max slots per Lease, for Result.Limit and header fields
	localLimit Limit                 // FailLocal's share: Max / Instances slots per Lease
	leaseObs   LeaseObserver         // the observer, when it is one
	rate       *Limiter              // ConcurrencyConfig.Rate
	acquiring  transport.LeaseQueues // acquires waiting for their key's call (RedisStore)

	mu       sync.Mutex
	kept     map[*Lease]struct{} // leases renewed in the background
	renewing bool                // the renewal goroutine runs
}

// Lease is one slot held by an Acquire. Release gives it back; KeepAlive
// keeps it past its Lease. A Lease is safe for concurrent use.
type Lease struct {
	c    *Concurrency
	subj string       // the key as the store keeps it
	id   string       // ≥ 96 random bits
	from atomic.Int32 // where the slot is held: heldInStore, heldLocally, heldNowhere

	released atomic.Bool
	kept     atomic.Bool
	renewed  int64 // c.clock() at the acquire or last renewal; guarded by c.mu
}

// Where a lease's slot is held.
const (
	heldInStore = iota // the Concurrency's store
	heldLocally        // FailLocal's in-process leases
	heldNowhere        // FailOpen admitted without a slot, or a local lease the store refused
)

// NewConcurrency checks cfg and returns a Concurrency. It does not
// contact the store.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	gc := cfg.guardConfig()
	if err := gc.check("ConcurrencyConfig"); err != nil {
		return nil, err
	}
	if err := checkConcurrency(cfg); err != nil {
		return nil, err
	}
	c := &Concurrency{
		name:  cfg.Name,
		max:   cfg.Max,
		lease: orDefault(cfg.Lease, defaultLease),
		kept:  make(map[*Lease]struct{}),
		rate:  cfg.Rate,
	}
	if err := c.guard.init(gc); err != nil {
		return nil, err
	}
	if cfg.Rate != nil && cfg.Rate.store != c.store {
		return nil, fmt.Errorf("%w: ConcurrencyConfig.Rate must use the Concurrency's Store: one store call decides both", ErrInvalidConfig)
	}
	c.leaseObs, _ = cfg.Observer.(LeaseObserver)
	if c.lease < 3*c.timeout || c.lease < time.Millisecond || c.lease > 24*time.Hour {
		return nil, fmt.Errorf("%w: Lease %v: between 3 × Timeout (%v) and 24h, so a renewal can be late and still arrive in time", ErrInvalidConfig, c.lease, c.timeout)
	}
	c.limit = Limit{Rate: c.max, Period: c.lease, Burst: c.max}
	local := max(1, c.max/max(1, gc.instances))
	c.localLimit = Limit{Rate: local, Period: c.lease, Burst: local}
	return c, nil
}

// checkConcurrency rejects what NewConcurrency cannot build, beyond what
// every limiter's guard checks.
func checkConcurrency(cfg ConcurrencyConfig) error {
	if cfg.Name == "" {
		return fmt.Errorf("%w: ConcurrencyConfig.Name is required: instances share slots by Name", ErrInvalidConfig)
	}
	if err := validName(cfg.Name); err != nil {
		return err
	}
	for _, p := range rateLimits(cfg.Rate) {
		if p.Name == cfg.Name {
			return fmt.Errorf("%w: ConcurrencyConfig.Name %q is also a name of its Rate's limits; a refusal names the limit that refused", ErrInvalidConfig, cfg.Name)
		}
	}
	if cfg.Max < 1 || cfg.Max > maxHeaderInt {
		return fmt.Errorf("%w: ConcurrencyConfig.Max %d; at least 1", ErrInvalidConfig, cfg.Max)
	}
	if cfg.Lease < 0 {
		return fmt.Errorf("%w: Lease must not be negative", ErrInvalidConfig)
	}
	return nil
}

// Name returns the limit's name (ConcurrencyConfig.Name).
func (c *Concurrency) Name() string { return c.name }

// Rate returns the rate limit decided with every acquire
// (ConcurrencyConfig.Rate), or nil.
func (c *Concurrency) Rate() *Limiter { return c.rate }

// Limit describes the limit as Result.Limit does: Max slots (Burst and
// Rate) per Lease (Period), the header fields' RateLimit-Limit and window.
func (c *Concurrency) Limit() Limit { return c.limit }

// Acquire takes one of key's slots if one is free. When it is, the Lease
// holds it until Release (or for Lease, unless kept alive), and the
// Result says Allowed with Remaining the slots still free. When every
// slot is held the lease is nil and Result.RetryAfter is the time until
// the earliest lease ends: an upper bound, since holders usually release
// sooner. Result.Limit is Max slots per Lease,
// ResetAfter the time until the latest lease ends.
//
// The store call is bounded by Timeout, never by ctx's cancellation or
// deadline. When the store cannot answer in time, FailMode decides and
// Result.Degraded says so (FailOpen: a lease that holds nothing;
// FailLocal: one held in this process, Result.Fallback). The error is
// non-nil only for an empty key (ErrEmptyKey).
//
// With a Rate, the slot and one token of the Rate are taken together or
// not at all, and the Result is the Rate's (as AllowN would answer; on a
// refused slot, as Peek would), with Policies listing the Rate's limits,
// then the slots (Name, Max per Lease, slots left). A refusal says which
// refused: the parts whose RetryAfter is not zero; Result.Name, Limit,
// Remaining and RetryAfter are the one with the longest wait.
func (c *Concurrency) Acquire(ctx context.Context, key string) (*Lease, Result, error) {
	if key == "" {
		return nil, Result{}, ErrEmptyKey
	}
	return c.acquire(ctx, key, rand.Text())
}

// acquire takes a slot of key for lease id: in a store in this process
// at once, else through the guard.
func (c *Concurrency) acquire(ctx context.Context, key, id string) (*Lease, Result, error) {
	req := &bucket.LeaseAsk{Name: c.name, Subj: c.store.subject(key), ID: id, Max: c.max, Lease: c.lease, Timeout: c.timeout}
	if c.rate != nil {
		req.Policies = c.rate.set.policies
		req.Each = make([]bucket.Outcome, len(req.Policies))
	}
	if !c.store.remote() {
		a, _ := c.store.lease(ctx, leaseCall{op: leaseAcquire, acquire: req})
		return c.granted(ctx, req, a, heldInStore, time.Time{})
	}
	l, r := c.ask(ctx, req, time.Now())
	return l, r, nil
}

// ask asks the store for req's slot through the guard, by Timeout from
// start, and degrades by FailMode when it cannot answer.
func (c *Concurrency) ask(ctx context.Context, req *bucket.LeaseAsk, start time.Time) (*Lease, Result) {
	var a bucket.LeaseAnswer
	lc := leaseCall{op: leaseAcquire, deadline: start.Add(c.timeout), bound: c.bound, acquire: req, queues: &c.acquiring}
	br, err := c.call(ctx, req.Subj, lc.deadline, func(ctx context.Context) (err error) {
		a, err = c.store.lease(ctx, lc)
		return err
	})
	if err != nil {
		if !asked(err) {
			start = time.Time{}
		}
		return c.degrade(ctx, br, req, err, start)
	}
	l, r, _ := c.granted(ctx, req, a, heldInStore, start)
	return l, r
}

// granted returns the lease and Result of the store's answer a to req,
// and tells the observers; start is when the store was asked (zero: in
// process).
func (c *Concurrency) granted(ctx context.Context, req *bucket.LeaseAsk, a bucket.LeaseAnswer, from int8, start time.Time) (*Lease, Result, error) {
	l := c.grant(a, req.Subj, req.ID, from)
	if c.rate != nil {
		return l, c.settleRate(ctx, a, req, start), nil
	}
	c.decided(ctx, DecisionEvent{Allowed: a.Allowed}, start)
	return l, c.result(a, c.limit), nil
}

// grant returns the lease of an allowed answer, or nil, and tells the
// LeaseObserver of the slot taken and of the leases the store pruned.
func (c *Concurrency) grant(a bucket.LeaseAnswer, subj, id string, from int8) *Lease {
	var l *Lease
	if a.Allowed {
		l = &Lease{c: c, subj: subj, id: id, renewed: c.clock()}
		l.from.Store(int32(from))
	}
	if c.leaseObs != nil && from != heldNowhere && (a.Allowed || a.Pruned > 0) {
		e := LeaseEvent{Policy: c.name, Expired: a.Pruned}
		if a.Allowed {
			e.Held = 1
		}
		c.leaseObs.Leases(e)
	}
	return l
}

func (c *Concurrency) result(a bucket.LeaseAnswer, lim Limit) Result {
	return Result{
		Allowed:    a.Allowed,
		Limit:      lim,
		Name:       c.name,
		Remaining:  max(0, lim.Burst-a.Held),
		RetryAfter: a.RetryAfter,
		ResetAfter: a.ResetAfter,
	}
}

// degrade decides an acquire by FailMode because the store could not,
// and reports why, as a Limiter does; start is when the store was asked
// (zero: it was not). With a Rate, a granted slot's token is then decided
// by the Rate's FailMode, the slot given back if it refuses.
func (c *Concurrency) degrade(ctx context.Context, br *breaker, req *bucket.LeaseAsk, cause error, start time.Time) (*Lease, Result) {
	now := c.clock()
	c.report.degradedBy("", cause, now)
	// The fallback's own request, not req, which a store call running
	// late may still be filling. Its slot is one of localLimit.Burst, with no
	// Rate (decided below), under an id of its own once the store was
	// asked: that call takes its id back whenever it ends, which would
	// free this lease's slot once the store adopts it.
	local := bucket.LeaseAsk{Name: req.Name, Subj: req.Subj, ID: req.ID, Max: c.localLimit.Burst, Lease: req.Lease}
	if !start.IsZero() {
		local.ID = rand.Text()
	}
	a, from := c.fallback.acquire(br, now, &local)
	l := c.grant(a, local.Subj, local.ID, from)
	lim := c.limit
	if from == heldLocally {
		lim = c.localLimit
	}
	r := c.result(a, lim)
	r.Degraded, r.Fallback = true, from == heldLocally
	c.decided(ctx, DecisionEvent{Allowed: r.Allowed, Degraded: true, Err: cause}, start)
	if l == nil || c.rate == nil {
		return l, r
	}
	rate := c.rate
	rr := rate.degrade(ctx, rate.breakers.forKey(req.Subj), bucket.Ask{Op: bucket.OpTake, Subj: req.Subj, N: 1, Policies: rate.set.policies}, rate.set, cause, start)
	if !rr.Allowed {
		_ = l.Release(ctx) // held in process, or nowhere: no store call
		return nil, rr
	}
	return l, rr
}

// remove deletes lease id of subj from the store through the guard,
// within Timeout.
func (c *Concurrency) remove(ctx context.Context, subj, id string) error {
	lc := leaseCall{op: leaseRelease, deadline: time.Now().Add(c.timeout), bound: c.bound, name: c.name, subj: subj, id: id}
	_, err := c.call(ctx, subj, lc.deadline, func(ctx context.Context) error {
		_, err := c.store.lease(ctx, lc)
		return err
	})
	return err
}

// Release gives the slot back. It runs with ctx's values but never its
// cancellation, bounded by Timeout, so a request whose client went away
// still frees its slot; call it in a defer, so a panic frees it too. It
// removes only this lease, never another holder's, and only the first
// call does anything: later calls, and calls on a nil Lease, return nil.
// It stops KeepAlive's renewals. An error says the store could not be
// told (errors.Is ErrTimeout, ErrCircuitOpen, or the store's error): the
// slot then frees itself when the lease ends, within Lease.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return nil
	}
	c := l.c
	if l.kept.Load() {
		c.mu.Lock()
		delete(c.kept, l)
		c.mu.Unlock()
	}
	from := l.from.Load()
	if c.leaseObs != nil && from != heldNowhere {
		c.leaseObs.Leases(LeaseEvent{Policy: c.name, Held: -1})
	}
	switch {
	case from == heldNowhere:
		return nil
	case from == heldLocally:
		c.fallback.local.releaseLease(c.name, l.subj, l.id)
		return nil
	case !c.store.remote():
		_, err := c.store.lease(ctx, leaseCall{op: leaseRelease, name: c.name, subj: l.subj, id: l.id})
		return err
	}
	err := c.remove(ctx, l.subj, l.id)
	if err != nil {
		c.report.degradedBy("release", err, c.clock())
		return fmt.Errorf("core: concurrency %q: lease not released; it ends by itself within Lease: %w", c.name, err)
	}
	return nil
}

// KeepAlive renews the lease in the background until Release, so that a
// request or stream running longer than Lease keeps its slot: every
// Lease/3, one goroutine per Concurrency renews all its leases kept alive
// that were not renewed for Lease/6, in chunks of at most 500 leases,
// each chunk one store call per Redis node (per key on a Cluster or
// Ring) bounded by Timeout on its own. A renewal extends only a lease
// that still exists, to a Lease from then: one that ended while the store
// was unreachable is not brought back (its slot may already be another's),
// and is no longer renewed. Renewals the store cannot make are logged
// and tried again at the next round. Calling KeepAlive again,
// after Release, or on a nil Lease does nothing.
//
// A lease FailLocal granted in this process is renewed there only while
// the store cannot answer. At the first round the store answers, the
// lease is asked of the store under its own id: granted, it is held in
// the store from then on like any other; refused (the key's slots are
// full), it stops counting anywhere and is no longer renewed — its
// request runs on, since nothing can stop a running handler. So the
// leases FailLocal granted count beside the store's only during the
// outage and until the first renewal round after it (Lease/3), and a
// local lease that is not kept alive ends within Lease.
func (l *Lease) KeepAlive() {
	if l == nil || l.from.Load() == heldNowhere || l.released.Load() || l.kept.Load() {
		return
	}
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	// kept is set before released is read, and Release reads kept after
	// setting released: a Release racing this call either sees kept (and
	// waits for the lock to undo it) or is seen here.
	if l.kept.Swap(true) || l.released.Load() {
		return
	}
	c.kept[l] = struct{}{}
	if !c.renewing {
		c.renewing = true
		go c.renewLoop()
	}
}

// renewal is what became of one lease's renewal.
type renewal = bucket.Renewal

// Renewals.
const (
	renewUnknown = bucket.RenewUnknown // the call failed: tried again next round
	renewed      = bucket.Renewed
	renewGone    = bucket.RenewGone    // released, or pruned already: not renewed, never brought back
	renewExpired = bucket.RenewExpired // past its deadline, pruned by this renewal: likewise
)

// maxRenewLeases bounds the leases of one renewal call (Lua's unpack and
// the reply stay small, and a chunk takes Redis well under a Timeout):
// a round renews its leases in chunks, each a store call of its own.
const maxRenewLeases = 500

// renewLoop renews the kept leases every Lease/3 and exits when none is
// left; KeepAlive starts it again.
func (c *Concurrency) renewLoop() {
	t := time.NewTicker(c.lease / 3)
	defer t.Stop()
	for range t.C {
		if !c.renew(c.lease / 6) {
			return
		}
	}
}

// renew renews the kept leases last renewed at least age ago, and
// reports whether any lease is still kept (if not, the renewal goroutine
// has been marked stopped).
func (c *Concurrency) renew(age time.Duration) bool {
	now := c.clock()
	var ls []*Lease
	c.mu.Lock()
	if len(c.kept) == 0 {
		c.renewing = false
		c.mu.Unlock()
		return false
	}
	for l := range c.kept {
		if time.Duration(now-l.renewed) >= age {
			ls = append(ls, l)
		}
	}
	c.mu.Unlock()
	got := c.renewAll(ls)
	e := LeaseEvent{Policy: c.name}
	c.mu.Lock()
	for i, l := range ls {
		switch got[i] {
		case renewed:
			l.renewed = now
			e.Renewed++
		case renewExpired:
			e.Expired++
			fallthrough
		case renewGone:
			delete(c.kept, l) // never brought back
		}
	}
	c.mu.Unlock()
	if c.leaseObs != nil && (e.Renewed > 0 || e.Expired > 0) {
		c.leaseObs.Leases(e)
	}
	return true
}

// renewAll renews ls: the leases held in the store in chunks of at most
// maxRenewLeases, each its own store call through the guard; the leases
// FailLocal holds in process by adopt.
func (c *Concurrency) renewAll(ls []*Lease) []renewal {
	got := make([]renewal, len(ls))
	var store []*Lease
	var at []int
	down := false // an adoption failed this round: renew the others locally
	for i, l := range ls {
		if l.from.Load() == heldLocally {
			got[i], down = c.adopt(l, down)
			continue
		}
		store, at = append(store, l), append(at, i)
	}
	for len(store) > 0 {
		n := min(len(store), maxRenewLeases)
		for j, r := range c.renewChunk(store[:n]) {
			got[at[j]] = r
		}
		store, at = store[n:], at[n:]
	}
	return got
}

// renewChunk renews ls (at most maxRenewLeases, all held in the store) in
// one store call, bounded by Timeout from its own start.
func (c *Concurrency) renewChunk(ls []*Lease) []renewal {
	lc := leaseCall{op: leaseRenew, name: c.name, lease: c.lease, held: ls, renewed: make([]renewal, len(ls))}
	if !c.store.remote() {
		_, _ = c.store.lease(context.Background(), lc)
		return lc.renewed
	}
	lc.deadline, lc.bound = time.Now().Add(c.timeout), c.bound
	_, err := c.call(context.Background(), ls[0].subj, lc.deadline, func(ctx context.Context) error {
		_, err := c.store.lease(ctx, lc)
		return err
	})
	if err != nil {
		c.report.degradedBy("renew", err, c.clock())
		return make([]renewal, len(ls))
	}
	return lc.renewed
}

// adopt renews l, a lease FailLocal holds in this process: in the store,
// under its own id, once the store answers (see KeepAlive); in process
// while it cannot, or when down says an adoption already failed this
// round (a round of many local leases makes one failed call, not one
// each). It reports whether the store could not be asked.
func (c *Concurrency) adopt(l *Lease, down bool) (renewal, bool) {
	req := &bucket.LeaseAsk{Name: c.name, Subj: l.subj, ID: l.id, Max: c.max, Lease: c.lease, Timeout: c.timeout}
	err := ErrCircuitOpen
	var a bucket.LeaseAnswer
	if !down {
		lc := leaseCall{op: leaseAcquire, deadline: time.Now().Add(c.timeout), bound: c.bound, acquire: req}
		_, err = c.call(context.Background(), l.subj, lc.deadline, func(ctx context.Context) (err error) {
			a, err = c.store.lease(ctx, lc)
			return err
		})
	}
	if err != nil {
		return c.fallback.local.renewLease(c.name, l.subj, l.id, c.lease), true
	}
	c.fallback.local.releaseLease(c.name, l.subj, l.id)
	if !a.Allowed {
		l.from.Store(heldNowhere)
		if c.leaseObs != nil {
			c.leaseObs.Leases(LeaseEvent{Policy: c.name, Held: -1})
		}
		return renewGone, false
	}
	l.from.Store(heldInStore)
	if l.released.Load() {
		// Released while adopted: Release freed the local slot only.
		_ = c.remove(context.Background(), l.subj, l.id)
		return renewGone, false
	}
	return renewed, false
}
