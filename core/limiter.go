package core

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Config configures a Limiter. Store, Limit and FailMode are required; every
// other field has the default its comment gives for its zero value.
type Config struct {
	// Store keeps the buckets: NewRedisStore to share a limit across
	// instances, NewMemoryStore for one process.
	Store Store
	// Limit is the token bucket every key gets.
	Limit Limit
	// FailMode is what happens when Store cannot decide. Required: there is
	// no safe default for every API. See FailOpen, FailClosed, FailLocal.
	FailMode FailMode
	// Name is the policy name: it namespaces buckets in the store and labels
	// RateLimit-Policy. Default Limit.String() (e.g. "3-per-1m0s"), so
	// limiters with different limits never share buckets by accident; give
	// two limiters the same Name only to share their buckets on purpose.
	// 1–64 printable ASCII characters, no spaces, '{', '}', '"' or '\'.
	Name string
	// Extra adds limits decided together with Limit in the same atomic
	// store call, for the same key: all or nothing, so a denial by one takes
	// nothing from the others (e.g. 10 per second and 1000 per hour). The
	// Result reports the binding limit and lists all in Result.Policies.
	// Names default to Limit.String() and must differ from each other and
	// from Name.
	Extra []NamedLimit
	// Timeout bounds what one decision waits, from its start, whatever it
	// waits on and whatever the Redis client's own timeouts and retries;
	// past it, FailMode decides. The store call itself may run on after
	// its caller stopped waiting (a call is given at least 1s, so that a
	// slow Redis does not cost a connection per call), counted in
	// MaxInFlight until it ends. The caller's context gives its values,
	// never its cancellation or deadline (a client that went away must
	// not turn a decision into a store failure). At least 1ms; default
	// 50ms.
	Timeout time.Duration
	// Instances is the number of app instances sharing the limit, for
	// FailLocal, whose in-process buckets hold Limit / Instances (rate and
	// burst; the burst is at least 1). Ignored otherwise. 0 with FailLocal
	// learns it: each instance stamps itself in a live set in the store,
	// at most every 2s while its decisions ask the store, and divides by
	// the instances stamped within the last 10s, as last seen; an outage
	// keeps that count, and an instance that has not seen one yet counts
	// itself alone. DecisionEvent.Instances and the degraded log line give
	// the count in use. See docs/guide.md, "When Redis fails".
	Instances int
	// LocalMaxKeys bounds FailLocal's in-process buckets (see
	// WithMaxKeys), so a flood of new keys during an outage costs bounded
	// memory. Default 65536 (about 10 MB).
	LocalMaxKeys int
	// BreakerFailures is how many consecutive failed store calls open the
	// circuit breaker. The breakers are the store's, one per Redis node,
	// shared by every Limiter and Concurrency on it (one outage, one
	// opening per node): a failed call of this limiter opens its node's
	// breaker when the node's consecutive failed calls, whichever
	// limiter's, reach this limiter's BreakerFailures. A call counts once
	// however many decisions rode in it, so a flood of decisions batched
	// into a few calls is a few failures, not thousands. Default 3.
	BreakerFailures int
	// BreakerCooldown is how long a breaker this limiter's call opened (or
	// whose probe it failed) keeps the node uncalled before one probe, for
	// every limiter on the store; at most 1s. Default 500ms.
	BreakerCooldown time.Duration
	// MaxInFlight bounds the decisions still running in the store: queued
	// or in a store call, including calls that outlive their callers'
	// deadlines (a stalled Redis keeps them running past Timeout, and with
	// them the goroutines that carry them). Beyond it FailMode decides at
	// once, with ErrOverloaded. A RedisStore counts its decisions across
	// every limiter using it, each limiter holding them to its own bound.
	// Default 4096.
	MaxInFlight int
	// DenyCacheSize bounds the local denial cache: once the store denies a
	// key, this instance denies that key (at that cost) without a
	// round trip until the bucket could first serve it again — never longer,
	// and never admitting anything. Under a flood on one key, store calls
	// fall to about the admitted rate. Default 65536 denials (one per key
	// and limit it was decided under); -1 disables it.
	// Not used with a MemoryStore (nothing to save). A Reset on another
	// instance does not clear this instance's cache.
	DenyCacheSize int
	// Observer, if set, sees every decision and breaker change: metrics,
	// and the one hook for store failures (DecisionEvent.Err says why a
	// decision was degraded).
	Observer Observer
	// Logger receives one warning per 10 seconds at most while decisions
	// are degraded, naming the policy, with how many were and the cause;
	// and a breaker's opening (at most one line per 10 seconds and node)
	// and closing when this limiter's call opened it.
	// Default slog.Default().
	Logger *slog.Logger
	// MaxWait is how far ahead a key's bucket may be booked: a reservation
	// (ReserveN, WaitN) waits at most MaxWait, so the bucket owes at most
	// the tokens that refill in MaxWait; Charge may leave it owing
	// max(Burst, that). Default 0: nothing is booked ahead (ReserveN takes
	// only tokens that are there). See docs/waiting.md.
	MaxWait time.Duration
	// Borrow lets hot allowed keys be decided in process. 0 (default):
	// every decision asks the store. Else a key this instance decides
	// often (at least once per Borrow) borrows a slice of up to
	// Rate·Borrow/Period tokens of its bucket (of every Extra limit too)
	// in one store call and decides from it in process until it is spent
	// or its loan ends, Borrow after the borrow was sent; then it borrows
	// again. Never beyond the bucket's envelope: the store keeps the tokens
	// on loan out of the refill, so admissions across every instance stay
	// within Burst + Rate·Δ in any interval Δ; the price is under-use of at
	// most the tokens on loan, until the loans end. 0 or 1ms–1m. Not used
	// with a MemoryStore (nothing to save). See the README, "Hot keys".
	Borrow time.Duration
}

// Limiter decides whether requests keyed by a subject (an IP, an API key, a
// user) are within its limit. It is safe for concurrent use; make one per
// policy at startup and share it.
type Limiter struct {
	guard                  // how it reaches the store (see guard)
	set      *policySet    // Limit, then Extra
	perLimit limitSets     // AllowLimit's limits, then Extra
	denials  *denyCache    // nil when disabled, or for an in-process store
	maxWait  time.Duration // Config.MaxWait
	borrow   *sliceTable   // Config.Borrow's; nil when off

	// base is the limiter whose state this one uses: itself, or for a
	// view (With) the limiter it was made from, deciding under set.
	base *Limiter
}

// Defaults for Config's zero values.
const (
	DefaultTimeout         = 50 * time.Millisecond
	DefaultBreakerFailures = 3
)

// The defaults of Config.BreakerCooldown and Config.MaxInFlight, which
// their docs state.
const (
	defaultBreakerCooldown = 500 * time.Millisecond
	defaultMaxInFlight     = 4096
)

// Bounds of a non-zero Config.Borrow: a loan shorter than a millisecond
// saves nothing, and one longer than a minute keeps its unspent tokens
// from everyone else (and serves through an outage) too long.
const (
	minBorrow = time.Millisecond
	maxBorrow = time.Minute
)

// New checks cfg and returns a Limiter. It does not contact the store: an
// app starts even when Redis is unreachable, and FailMode covers it.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	gc := cfg.guardConfig()
	if err := gc.check("Config"); err != nil {
		return nil, err
	}
	if cfg.DenyCacheSize < -1 {
		return nil, fmt.Errorf("%w: DenyCacheSize %d; use -1 to disable", ErrInvalidConfig, cfg.DenyCacheSize)
	}
	if cfg.MaxWait < 0 || cfg.MaxWait > maxMaxWait {
		return nil, fmt.Errorf("%w: MaxWait %v is outside [0, %v]", ErrInvalidConfig, cfg.MaxWait, maxMaxWait)
	}
	if cfg.Borrow != 0 && (cfg.Borrow < minBorrow || cfg.Borrow > maxBorrow) {
		return nil, fmt.Errorf("%w: Borrow %v is outside [%v, %v]; 0 turns borrowing off", ErrInvalidConfig, cfg.Borrow, minBorrow, maxBorrow)
	}
	cfg.Instances = gc.instances
	if cfg.FailMode == FailLocal {
		cfg.Instances = max(1, cfg.Instances) // shares before a learned count: 1
	}
	defaulted := []bool{cfg.Name == ""}
	for _, nl := range cfg.Extra {
		defaulted = append(defaulted, nl.Name == "")
	}
	cfg.Name = cmp.Or(cfg.Name, cfg.Limit.String())
	set, err := newPolicySet(append([]NamedLimit{{Name: cfg.Name, Limit: cfg.Limit}}, cfg.Extra...), cfg.Instances)
	if err != nil {
		return nil, err
	}
	gc.name = cfg.Name
	l := &Limiter{set: set, perLimit: limitSets{extra: cfg.Extra, name: cfg.Name, instances: cfg.Instances}, maxWait: cfg.MaxWait}
	l.base = l
	if err := l.guard.init(gc); err != nil {
		return nil, err
	}
	store := l.store
	if store.remote() {
		l.borrow = newSlices(cfg.Borrow, set)
	}
	if store.remote() && cfg.DenyCacheSize != -1 {
		l.denials = newDenyCache(orDefault(cfg.DenyCacheSize, defaultDenyCacheSize), l.timeout)
	}
	if book := store.policyNames(); book != nil {
		if err := book.claim(l, set.policies, defaulted); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// guardConfig is what cfg says of the Limiter's guard.
func (cfg *Config) guardConfig() guardConfig {
	return guardConfig{store: cfg.Store, name: cfg.Name, mode: cfg.FailMode, timeout: cfg.Timeout,
		failures: cfg.BreakerFailures, cooldown: cfg.BreakerCooldown, maxInFlight: cfg.MaxInFlight,
		instances: cfg.Instances, learns: true, localMaxKeys: cfg.LocalMaxKeys,
		observer: cfg.Observer, logger: cfg.Logger}
}

func validName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("%w: Name %.20q… is longer than 64 bytes", ErrInvalidConfig, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == '"' || c == '\\' {
			return fmt.Errorf("%w: Name %q: only printable ASCII without spaces, braces, quotes or backslashes", ErrInvalidConfig, name)
		}
	}
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Limit returns the limiter's limit (Config.Limit).
func (l *Limiter) Limit() Limit { return l.set.limits[0] }

// Name returns the limiter's policy name.
func (l *Limiter) Name() string { return l.set.policies[0].Name }

// Limits returns the limiter's limits with their policy names, in
// configuration order: Config.Limit (named Name), then Config.Extra. The
// slice is the caller's.
func (l *Limiter) Limits() []NamedLimit {
	ls := make([]NamedLimit, len(l.set.policies))
	for i, p := range l.set.policies {
		ls[i] = NamedLimit{Name: p.Name, Limit: l.set.limits[i]}
	}
	return ls
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.base.take(ctx, key, 1, l.set)
}

// AllowN decides whether key may spend n tokens now, and takes them if so.
// A denied request takes nothing.
//
// The error is non-nil only for a caller's mistake: an empty key
// (ErrEmptyKey), n < 1 (ErrInvalidCost) or n above the burst
// (ErrCostTooHigh). When the store cannot decide within Config.Timeout, the
// FailMode does, and the Result says Degraded.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Result, error) {
	return l.base.take(ctx, key, n, l.set)
}

// AllowLimit is AllowN under lim instead of Config.Limit, in the same
// buckets (the same Name) — shorthand for With(lim) then AllowN: for a
// limit known only per request, such as a
// tenant's own quota read from a database. What key has spent carries
// over between limits (see the README, "Limits per tenant"). Config.Extra
// still applies: lim takes Config.Limit's place and is decided together
// with the Extra limits, all or nothing. Result.Limit is lim (or the
// binding Extra limit), and with FailLocal the in-process bucket holds
// lim / Instances.
//
// A denial this instance caches answers only requests under the same
// limit: a tenant moved to a bigger plan is asked of the store at once.
// The arithmetic of a limit is cached, for at most 1024 distinct limits
// per limiter. Beyond AllowN's errors, an invalid lim is ErrInvalidLimit
// (as New would refuse it as Config.Limit), and n above lim's burst
// ErrCostTooHigh.
func (l *Limiter) AllowLimit(ctx context.Context, key string, n int, lim Limit) (Result, error) {
	set, err := l.base.setFor(lim)
	if err != nil {
		return Result{}, err
	}
	return l.base.take(ctx, key, n, set)
}

// setFor returns the policy set deciding under lim; l is a base.
func (l *Limiter) setFor(lim Limit) (*policySet, error) {
	if lim == l.set.limits[0] {
		return l.set, nil
	}
	return l.perLimit.get(lim)
}

// Peek reports key's state for a request of cost n without taking
// anything: Result.Allowed says whether AllowN(ctx, key, n) would be
// allowed now, and Remaining, RetryAfter and ResetAfter are what it would
// answer had it been denied. One store round trip, never a write; for a
// status endpoint, or the headers of a request that is not limited. Store
// trouble is decided as for AllowN (FailOpen answers allowed), taking
// nothing.
func (l *Limiter) Peek(ctx context.Context, key string, n int) (Result, error) {
	return l.base.decide(ctx, bucket.OpPeek, key, n, l.set)
}

// Refund gives n tokens back to key's bucket under every limit, each
// capped at its burst, in one atomic store call: for a request that should
// not count after all (see nethttp's WithCountIf), or one that used less
// than it took. n above the smallest burst gives back that burst (a
// bucket never holds more). The Result is the bucket's state after the
// refund. The error is non-nil only for a caller's mistake (an empty key,
// n < 1); a refund
// the store could not make is Result.Degraded, reported like any degraded
// decision (with FailLocal, the in-process bucket gets it). Refunding what
// was never taken only fills the bucket up to its burst: the limit never
// admits more than it would have had the refunded requests never been
// made. A refund forgets this instance's cached denial of key; other
// instances' cached denials run to their end (they only ever deny).
func (l *Limiter) Refund(ctx context.Context, key string, n int) (Result, error) {
	return l.base.decide(ctx, bucket.OpRefund, key, n, l.set)
}

// take is AllowN under set. A store in this process decides a take
// under one limit in place (take1), and this frame builds the Result (13
// words) in place (BENCHMARKS.md, "Tricks kept"). Every other case goes
// on in decide.
func (l *Limiter) take(ctx context.Context, key string, n int, set *policySet) (r Result, err error) {
	if len(set.policies) > 1 {
		return l.decide(ctx, bucket.OpTake, key, n, set)
	}
	if key == "" || n < 1 || n > set.minCap {
		return r, checkCall(key, n, set)
	}
	d, ok := l.store.take1(key, n, &set.policies[0])
	if !ok {
		return l.decide(ctx, bucket.OpTake, key, n, set)
	}
	if l.observer != nil {
		l.observe(ctx, bucket.OpTake, DecisionEvent{Policy: set.name(), Allowed: d.Allowed})
	}
	r.Allowed, r.Limit, r.Name = d.Allowed, set.limits[0], set.policies[0].Name
	r.Remaining, r.RetryAfter, r.ResetAfter = int(d.Remaining), d.RetryAfter, d.ResetAfter
	return r, nil
}

// decide takes, peeks or refunds (op) n tokens of key under set; a
// refund above the smallest burst gives back that burst.
func (l *Limiter) decide(ctx context.Context, op int, key string, n int, set *policySet) (Result, error) {
	if op == bucket.OpRefund {
		n = min(n, set.minCap)
	}
	if key == "" || n < 1 || n > set.minCap {
		return Result{}, checkCall(key, n, set)
	}
	return l.run(ctx, op, key, n, set), nil
}

// run asks l's store to do op (a take, peek or refund, or a waiting
// operation with its argument) for n tokens of key under set, through the
// guard for a store outside the process; the caller checked key and n.
// Every op that gives back or books forgets this instance's cached denial
// of key once the store answered (see denyCache.forget): after a refund
// or a cancel the key may be served sooner, and after a booking, a charge
// or a pause later, so the next take asks the store for the true
// RetryAfter.
func (l *Limiter) run(ctx context.Context, op int, key string, n int, set *policySet) Result {
	// Keys of any length cost bounded memory in every store and cache.
	key = l.store.subject(key)
	var each []bucket.Outcome
	if len(set.policies) > 1 {
		each = make([]bucket.Outcome, len(set.policies))
	}
	a := bucket.Ask{Op: op, Subj: key, N: n, Policies: set.policies, Each: each}
	if !l.store.remote() {
		// Arguments are checked: no I/O, no failure, no guard.
		o, _ := l.store.call(ctx, a)
		if l.observer != nil {
			l.observe(ctx, op, DecisionEvent{Policy: set.name(), Allowed: o.Allowed})
		}
		return resultOf(o, each, set)
	}
	if op == bucket.OpTake && l.borrow != nil && set == l.set {
		if r, ok := l.fromSlice(ctx, a, set); ok {
			return r
		}
	}
	if op == bucket.OpTake && l.denials != nil {
		return l.takeCached(ctx, a, set)
	}
	r := l.remote(ctx, a, set, time.Now())
	if op != bucket.OpTake && op != bucket.OpPeek && l.denials != nil {
		l.denials.forget(key, l.clock(), int64(l.timeout))
	}
	return r
}

// checkCall rejects a caller's mistakes: an empty key, n < 1, n above the
// smallest burst of set.
func checkCall(key string, n int, set *policySet) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case n < 1:
		return fmt.Errorf("%w (got %d)", ErrInvalidCost, n)
	case n > set.minCap:
		return fmt.Errorf("%w (cost %d, burst %d)", ErrCostTooHigh, n, set.minCap)
	}
	return nil
}

// Reset makes key's bucket full again (for example after a successful
// login).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	l, set := l.base, l.set // a view's buckets (Under's are its own)
	if key == "" {
		return ErrEmptyKey
	}
	key = l.store.subject(key)
	if l.fallback.local != nil {
		l.fallback.local.table.Clear(key, set.local.policies)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := l.store.call(ctx, bucket.Ask{Op: bucket.OpClear, Subj: key, Policies: set.policies, Deadline: deadline})
	if l.borrow != nil {
		l.borrow.drop(key)
	}
	if l.denials != nil {
		l.denials.forget(key, l.clock(), int64(l.timeout))
	}
	return err
}

// resultOf is the Result of o (and each) under set.
func resultOf(o bucket.Outcome, each []bucket.Outcome, set *policySet) Result {
	r := Result{
		Allowed:    o.Allowed,
		Limit:      set.limits[o.Policy],
		Name:       set.policies[o.Policy].Name,
		Remaining:  int(o.Remaining),
		RetryAfter: o.RetryAfter,
		ResetAfter: o.ResetAfter,
		extra:      o.Extra,
	}
	if each != nil {
		r.Policies = make([]PolicyResult, len(each))
		for i, e := range each {
			r.Policies[i] = PolicyResult{
				Name:       set.policies[i].Name,
				Limit:      set.limits[i],
				Remaining:  int(e.Remaining),
				RetryAfter: e.RetryAfter,
				ResetAfter: e.ResetAfter,
			}
		}
	}
	return r
}
