package core

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ConcurrencyConfig configures a Concurrency. Store, Name, Max and
// FailMode are required; every other field has the default its comment
// gives for its zero value.
type ConcurrencyConfig struct {
	// Store keeps the leases: NewRedisStore to share the limit across
	// instances, NewMemoryStore for one process. Other stores cannot hold
	// leases.
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
	// held in this process. Required.
	FailMode FailMode
	// Timeout bounds each store call (acquire, release, a renewal batch)
	// from its start, whatever the Redis client's own timeouts and
	// retries. The caller's context gives its values, never its
	// cancellation. Default 50ms.
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
	// call is the Concurrency's: bounded by its Timeout, through its
	// breaker (Rate's denial cache is not asked). See Acquire for the
	// Result.
	Rate *Limiter
	// Observer, if set, sees every acquire the slots decided as a
	// Decision (Policy is Name; Allowed: a slot was granted) and every
	// breaker change; a metrics.Collector counts them as it counts a
	// Limiter's decisions. An Observer that is also a LeaseObserver sees
	// the leases held, renewed and expired.
	Observer Observer
	// OnError, if set, is called with the reason for every degraded
	// acquire, and for every release or renewal the store could not make
	// (the lease then ends by itself within Lease). It may run on the
	// request's goroutine or the renewal goroutine: keep it fast.
	OnError func(error)
}

// DefaultLease is ConcurrencyConfig.Lease's default.
const DefaultLease = 15 * time.Second

// Concurrency limits the requests per key in flight at once: at most Max
// leases per key, across every instance sharing the store (Stripe's
// concurrent-requests limiter, GitHub's secondary limit). Each lease is a
// member of the key's set in the store with a deadline on the store's
// clock; a lease that is neither released nor renewed ends at its
// deadline, so a crashed instance never holds slots for longer than Lease.
//
// On a RedisStore, an acquire is one script call and a release one
// command; renewals of every lease kept alive by one Concurrency leave
// together, one call per Redis node (one per key on a Cluster or Ring)
// every Lease/3, not one per request. A refused acquire writes nothing.
//
// A Concurrency is safe for concurrent use; make one per limit at startup
// and share it.
type Concurrency struct {
	rs       *RedisStore
	mem      *MemoryStore // the store, when it is one
	name     string
	max      int
	lease    time.Duration
	mode     FailMode
	timeout  time.Duration
	limit    Limit // Max slots per Lease, for Result.Limit and header fields
	onError  func(error)
	observer Observer
	leaseObs LeaseObserver // observer, when it is one
	rate     *Limiter      // ConcurrencyConfig.Rate
	clock    func() int64  // ns, monotonic: breakers and renewal ages

	breaker  breaker  // the store's, or its only node's
	breakers sync.Map // node → *breaker, for a Cluster or Ring
	inflight atomic.Int64

	local      *MemoryStore // FailLocal's leases
	localMax   int
	localLimit Limit

	mu       sync.Mutex
	kept     map[*Lease]struct{} // leases renewed in the background
	renewing bool                // the renewal goroutine runs
}

// Lease is one slot held by an Acquire. Release gives it back; KeepAlive
// keeps it past its Lease. A Lease is safe for concurrent use.
type Lease struct {
	c    *Concurrency
	subj string // the key as the stores keep it
	id   string // ≥ 96 random bits
	from int8   // where the slot is held

	released atomic.Bool
	kept     atomic.Bool
	renewed  int64 // c.clock() at the acquire or last renewal; guarded by c.mu
}

// Where a lease's slot is held.
const (
	heldInStore = iota // the Concurrency's store
	heldLocally        // FailLocal's in-process leases
	heldNowhere        // FailOpen admitted without a slot
)

// maxLeaseCalls bounds the store calls still running past their callers'
// deadlines (a stalled Redis, a client that does not honour deadlines);
// beyond it FailMode decides at once.
const maxLeaseCalls = DefaultMaxInFlight

// NewConcurrency checks cfg and returns a Concurrency. It does not
// contact the store.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	if err := checkConcurrency(cfg); err != nil {
		return nil, err
	}
	c := &Concurrency{
		name:     cfg.Name,
		max:      cfg.Max,
		lease:    orDefault(cfg.Lease, DefaultLease),
		mode:     cfg.FailMode,
		timeout:  orDefault(cfg.Timeout, DefaultTimeout),
		onError:  cfg.OnError,
		kept:     make(map[*Lease]struct{}),
		observer: cfg.Observer,
		rate:     cfg.Rate,
	}
	c.rs, _ = cfg.Store.(*RedisStore)
	c.mem, _ = cfg.Store.(*MemoryStore)
	c.leaseObs, _ = cfg.Observer.(LeaseObserver)
	if c.lease < 3*c.timeout || c.lease < time.Millisecond || c.lease > 24*time.Hour {
		return nil, fmt.Errorf("%w: Lease %v: between 3 × Timeout (%v) and 24h, so a renewal can be late and still arrive in time", ErrInvalidConfig, c.lease, c.timeout)
	}
	c.limit = Limit{Rate: c.max, Period: c.lease, Burst: c.max}
	c.breaker.threshold = DefaultBreakerFailures
	c.breaker.cooldown = int64(DefaultBreakerCooldown)
	start := time.Now()
	c.clock = func() int64 { return int64(time.Since(start)) }
	if cfg.FailMode == FailLocal {
		if cfg.Instances == 0 {
			return nil, fmt.Errorf("%w: FailLocal needs ConcurrencyConfig.Instances, the number of app instances sharing the limit", ErrInvalidConfig)
		}
		c.localMax = max(1, c.max/cfg.Instances)
		c.localLimit = Limit{Rate: c.localMax, Period: c.lease, Burst: c.localMax}
		c.local = NewMemoryStore()
	}
	return c, nil
}

// checkConcurrency rejects what NewConcurrency cannot build.
func checkConcurrency(cfg ConcurrencyConfig) error {
	if cfg.Store == nil {
		return ErrNoStore
	}
	rs, _ := cfg.Store.(*RedisStore)
	mem, _ := cfg.Store.(*MemoryStore)
	switch {
	case rs != nil && rs.nilClient():
		return fmt.Errorf("%w: the RedisStore's client is a nil %T", ErrNoStore, rs.client)
	case rs == nil && mem == nil:
		return fmt.Errorf("%w: a %T cannot hold leases; use a RedisStore or MemoryStore", ErrInvalidConfig, cfg.Store)
	case cfg.Rate != nil && any(cfg.Rate.store) != any(cfg.Store):
		return fmt.Errorf("%w: ConcurrencyConfig.Rate must use the Concurrency's Store: one store call decides both", ErrInvalidConfig)
	}
	switch cfg.FailMode {
	case FailOpen, FailClosed, FailLocal:
	case 0:
		return ErrFailModeUnset
	default:
		return fmt.Errorf("%w (got %d)", ErrInvalidFailMode, int(cfg.FailMode))
	}
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
	if cfg.Timeout < 0 || cfg.Lease < 0 || cfg.Instances < 0 {
		return fmt.Errorf("%w: Timeout, Lease and Instances must not be negative", ErrInvalidConfig)
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
// sooner. Result.Limit is Max slots per Lease, ResetAfter the time until
// the latest lease ends.
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

// acquire takes a slot of key for lease id.
func (c *Concurrency) acquire(ctx context.Context, key, id string) (*Lease, Result, error) {
	if c.rate != nil {
		return c.acquireRate(ctx, key, id)
	}
	subj := hashSubject(key)
	if c.mem != nil {
		a := c.mem.acquireLease(c.name, subj, id, c.max, c.lease, nil)
		c.observe(ctx, a.allowed, false, 0, nil)
		return c.grant(a, subj, id, heldInStore), c.result(a, c.limit), nil
	}
	start := time.Now()
	br := c.breakerFor(subj)
	call, probe := br.allow(c.clock())
	if !call {
		l, r := c.degrade(br, subj, id, ErrCircuitOpen)
		c.observe(ctx, r.Allowed, true, 0, ErrCircuitOpen)
		return l, r, nil
	}
	var a leaseAnswer
	err := c.bounded(ctx, start, func(ctx context.Context) (err error) {
		a, err = c.rs.acquireLease(ctx, c.name, subj, id, c.max, c.lease)
		return err
	}, func(err error) {
		if err != nil || a.allowed {
			c.takeBack(ctx, subj, id)
		}
	})
	if err != nil {
		c.storeFailed(ctx, br, probe, subj, id, err)
		l, r := c.degrade(br, subj, id, err)
		c.observe(ctx, r.Allowed, true, time.Since(start), err)
		return l, r, nil
	}
	c.storeAnswered(br, probe)
	c.observe(ctx, a.allowed, false, time.Since(start), nil)
	return c.grant(a, subj, id, heldInStore), c.result(a, c.limit), nil
}

// storeFailed records a failed acquire of lease id with the breaker.
func (c *Concurrency) storeFailed(ctx context.Context, br *breaker, probe bool, subj, id string, err error) {
	c.failed(br, probe, err)
	if !errors.Is(err, ErrOverloaded) && !errors.Is(err, ErrTimeout) {
		// The call may have added the lease before its reply was lost.
		// (A call still running when its caller left is taken back when
		// it ends: see bounded's late.)
		go c.takeBack(ctx, subj, id)
	}
}

// takeBack removes lease id of an acquire whose caller was told it failed,
// rather than hold a phantom slot for Lease (best effort: unanswered, it
// ends by itself).
func (c *Concurrency) takeBack(ctx context.Context, subj, id string) {
	_ = c.remove(context.WithoutCancel(ctx), subj, id)
}

// storeAnswered records an answered store call with the breaker.
func (c *Concurrency) storeAnswered(br *breaker, probe bool) {
	if br.success(probe) && c.observer != nil {
		c.observer.BreakerChange(c.name, false)
	}
}

// observe tells the Observer about one acquire.
func (c *Concurrency) observe(ctx context.Context, allowed, degraded bool, latency time.Duration, err error) {
	if c.observer != nil {
		c.observer.Decision(DecisionEvent{Policy: c.name, Allowed: allowed, Degraded: degraded, Latency: latency, Err: err,
			DryRun: !allowed && isDryRun(ctx)})
	}
}

// grant returns the lease of an allowed answer, or nil, and tells the
// LeaseObserver of the slot taken and of the leases the store pruned.
func (c *Concurrency) grant(a leaseAnswer, subj, id string, from int8) *Lease {
	var l *Lease
	if a.allowed {
		l = &Lease{c: c, subj: subj, id: id, from: from, renewed: c.clock()}
	}
	if c.leaseObs != nil && (a.allowed || a.pruned > 0) {
		e := LeaseEvent{Policy: c.name, Expired: a.pruned}
		if a.allowed {
			e.Held = 1
		}
		c.leaseObs.Leases(e)
	}
	return l
}

func (c *Concurrency) result(a leaseAnswer, lim Limit) Result {
	return Result{
		Allowed:    a.allowed,
		Limit:      lim,
		Name:       c.name,
		Remaining:  max(0, lim.Burst-a.held),
		RetryAfter: a.retryAfter,
		ResetAfter: a.resetAfter,
	}
}

// degrade decides an acquire by FailMode because the store could not.
func (c *Concurrency) degrade(br *breaker, subj, id string, cause error) (*Lease, Result) {
	c.report("acquire", cause)
	switch c.mode {
	case FailOpen:
		return &Lease{c: c, subj: subj, id: id, from: heldNowhere}, Result{Allowed: true, Limit: c.limit, Name: c.name, Degraded: true}
	case FailClosed:
		retry := br.retryIn(c.clock())
		if retry <= 0 {
			retry = time.Duration(br.cooldown)
		}
		return nil, Result{Limit: c.limit, Name: c.name, RetryAfter: retry, Degraded: true}
	}
	a := c.local.acquireLease(c.name, subj, id, c.localMax, c.lease, nil)
	r := c.result(a, c.localLimit)
	r.Degraded, r.Fallback = true, true
	return c.grant(a, subj, id, heldLocally), r
}

// bounded runs f on the caller's values but never its cancellation, and
// returns by Timeout from start whatever the client does; an error past
// that deadline is ErrTimeout, with the client's last error. f runs on a
// goroutine of its own (at most maxLeaseCalls at once) under a deadline
// of at least minSend, as a Limiter's batches do: go-redis closes a
// connection whose call outlived its context, so with Redis slow, calls
// under Timeout alone would each dial again, under Timeout, and fail.
// When f returns after the caller stopped waiting, late, if not nil,
// runs with its error, on that goroutine: to take back what f did.
func (c *Concurrency) bounded(ctx context.Context, start time.Time, f func(context.Context) error, late func(error)) error {
	if c.inflight.Add(1) > maxLeaseCalls {
		c.inflight.Add(-1)
		return ErrOverloaded
	}
	callCtx, cancelCall := context.WithDeadline(context.WithoutCancel(ctx), start.Add(max(c.timeout, minSend)))
	const waiting, left, answered = 0, 1, 2
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		defer c.inflight.Add(-1)
		defer cancelCall()
		err := f(callCtx)
		if state.CompareAndSwap(waiting, answered) {
			done <- err
		} else if late != nil {
			late(err)
		}
	}()
	t := time.NewTimer(time.Until(start.Add(c.timeout)))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	if !state.CompareAndSwap(waiting, left) {
		return <-done // answered as the deadline came: the answer stands
	}
	return fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
}

// failed records a failed store call with the breaker.
//
// As for a Limiter, only failing calls open the breaker: a call that ran
// out of time while the store shows no failure of its own (no fresh dial
// error, its last decision call answered) says that this one waited too
// long (a burst, this process starved of CPU), and degrades it alone.
func (c *Concurrency) failed(br *breaker, probe bool, err error) {
	slow := errors.Is(err, ErrTimeout) && c.rs.dialError() == nil && c.rs.cause() == nil
	if slow || slotMoving(err) || errors.Is(err, ErrOverloaded) {
		br.release(probe)
		return
	}
	if br.failure(probe, c.clock()) && c.observer != nil {
		c.observer.BreakerChange(c.name, true)
	}
}

// breakerFor returns the breaker of the store node holding subj's leases.
func (c *Concurrency) breakerFor(subj string) *breaker {
	if !c.rs.split {
		return &c.breaker
	}
	node := c.rs.node(subj)
	if b, ok := c.breakers.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := c.breakers.LoadOrStore(node, &breaker{threshold: c.breaker.threshold, cooldown: c.breaker.cooldown})
	return b.(*breaker)
}

// remove deletes lease id of subj from the store, within Timeout.
func (c *Concurrency) remove(ctx context.Context, subj, id string) error {
	br := c.breakerFor(subj)
	call, probe := br.allow(c.clock())
	if !call {
		return ErrCircuitOpen
	}
	err := c.bounded(ctx, time.Now(), func(ctx context.Context) error {
		return c.rs.releaseLease(ctx, c.name, subj, id)
	}, nil)
	if err != nil {
		c.failed(br, probe, err)
		return err
	}
	if br.success(probe) && c.observer != nil {
		c.observer.BreakerChange(c.name, false)
	}
	return nil
}

// report tells OnError why the store could not do op.
func (c *Concurrency) report(op string, cause error) {
	if c.onError != nil {
		c.onError(fmt.Errorf("core: concurrency %q: %s: store unavailable (FailMode %v): %w", c.name, op, c.mode, cause))
	}
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
	if c.leaseObs != nil && l.from != heldNowhere {
		c.leaseObs.Leases(LeaseEvent{Policy: c.name, Held: -1})
	}
	switch {
	case l.from == heldNowhere:
		return nil
	case l.from == heldLocally:
		c.local.releaseLease(c.name, l.subj, l.id)
		return nil
	case c.mem != nil:
		c.mem.releaseLease(c.name, l.subj, l.id)
		return nil
	}
	if err := c.remove(ctx, l.subj, l.id); err != nil {
		c.report("release", err)
		return fmt.Errorf("core: concurrency %q: lease not released; it ends by itself within Lease: %w", c.name, err)
	}
	return nil
}

// KeepAlive renews the lease in the background until Release, so that a
// request or stream running longer than Lease keeps its slot: every
// Lease/3, one goroutine per Concurrency renews all its leases kept alive
// that were not renewed for Lease/6, in one store call per Redis node (per
// key on a Cluster or Ring). A renewal extends only a lease that still
// exists, to a Lease from then: one that ended while the store was
// unreachable is not brought back (its slot may already be another's),
// and is no longer renewed. Renewals the store cannot make are reported
// to OnError and tried again at the next round. Calling KeepAlive again,
// after Release, or on a nil Lease does nothing.
func (l *Lease) KeepAlive() {
	if l == nil || l.from == heldNowhere || l.released.Load() || l.kept.Load() {
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
type renewal int8

const (
	renewUnknown renewal = iota // the call failed: tried again next round
	renewed
	renewGone    // released, or pruned already: not renewed, never brought back
	renewExpired // past its deadline, pruned by this renewal: likewise
)

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

// renewAll renews ls: the leases held in process one by one, those in
// the Redis store in one renewLeases call.
func (c *Concurrency) renewAll(ls []*Lease) []renewal {
	got := make([]renewal, len(ls))
	var store []*Lease
	var at []int
	for i, l := range ls {
		switch {
		case l.from == heldLocally:
			got[i] = c.local.renewLease(c.name, l.subj, l.id, c.lease)
		case c.mem != nil:
			got[i] = c.mem.renewLease(c.name, l.subj, l.id, c.lease)
		default:
			store, at = append(store, l), append(at, i)
		}
	}
	if len(store) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		ok, err := c.rs.renewLeases(ctx, c.name, c.lease, store)
		cancel()
		if err != nil {
			c.report("renew", err)
		}
		for j, i := range at {
			got[i] = ok[j]
		}
	}
	return got
}
