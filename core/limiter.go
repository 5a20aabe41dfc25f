package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
	// Timeout bounds one decision from its start, whatever it waits on
	// and whatever the Redis client's own timeouts and retries; past it,
	// FailMode decides. It alone bounds the store call: the caller's
	// context gives its values, never its cancellation or deadline (a
	// client that went away must not turn a decision into a store
	// failure). Default 50ms.
	Timeout time.Duration
	// Instances is the number of app instances sharing the limit. Required
	// with FailLocal, whose in-process buckets hold Limit / Instances (rate
	// and burst; the burst is at least 1). Ignored otherwise.
	Instances int
	// LocalMaxKeys bounds FailLocal's in-process buckets (see
	// WithMaxKeys), so a flood of new keys during an outage costs bounded
	// memory. Default 65536 (about 10 MB).
	LocalMaxKeys int
	// BreakerFailures is how many consecutive failed store calls open the
	// circuit breaker. A call counts once however many decisions rode in
	// it, so a flood of decisions batched into a few calls is a few
	// failures, not thousands. Default 3.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker keeps the store uncalled
	// before one probe; at most 1s. Default 500ms.
	BreakerCooldown time.Duration
	// MaxInFlight bounds the decisions still running in the store: queued
	// or in a store call, including calls that outlive their callers'
	// deadlines (a stalled Redis keeps them running past Timeout, and with
	// them the goroutines that carry them). Beyond it FailMode decides at
	// once, with ErrOverloaded. A RedisStore counts its decisions across
	// every limiter using it, each limiter holding them to its own bound;
	// for a Store of another package, each limiter counts the calls it
	// made that have not returned. Default 4096.
	MaxInFlight int
	// DenyCacheSize bounds the local denial cache: once the store denies a
	// key, this instance denies that key (at that cost or more) without a
	// round trip until the bucket could first serve it again — never longer,
	// and never admitting anything. Under a flood on one key, store calls
	// fall to about the admitted rate. Default 65536 keys; -1 disables it.
	// Not used with a MemoryStore (nothing to save). A Reset on another
	// instance does not clear this instance's cache.
	DenyCacheSize int
	// Observer, if set, sees every decision and breaker change (metrics).
	Observer Observer
	// OnError, if set, is called with the reason for every degraded decision
	// (errors.Is ErrTimeout, ErrCircuitOpen, ErrOverloaded, or the store's
	// error). It runs on the request's goroutine: keep it fast.
	OnError func(error)
	// Logger receives one warning per LogInterval at most while decisions are
	// degraded, with how many were. Default slog.Default().
	Logger *slog.Logger
	// LogInterval is the least time between two degraded-decision log lines.
	// Default 10s.
	LogInterval time.Duration
}

// Limiter decides whether requests keyed by a subject (an IP, an API key, a
// user) are within its limit. It is safe for concurrent use; make one per
// policy at startup and share it.
type Limiter struct {
	store       Store
	mem         *MemoryStore // Store, when it is one: decided in place, nothing to bound
	calls       storeCalls   // what the Limiter asks of Store, resolved in New
	name        string
	set         *policySet // Limit, then Extra
	perLimit    limitSets  // AllowLimit's limits, then Extra
	mode        FailMode
	timeout     time.Duration
	maxInFlight int64
	inflight    atomic.Int64 // calls of a foreign Store not yet returned (callBounded)
	breakers    nodeBreakers
	clock       func() int64 // ns, monotonic: breakers, denial cache, log throttle

	denials *denyCache   // nil when disabled
	local   *MemoryStore // FailLocal's buckets

	observer Observer
	report   reporter
}

// Defaults for Config's zero values.
const (
	DefaultTimeout         = 50 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 500 * time.Millisecond
	DefaultMaxInFlight     = 4096
	DefaultLogInterval     = 10 * time.Second
)

// New checks cfg and returns a Limiter. It does not contact the store: an
// app starts even when Redis is unreachable, and FailMode covers it.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	if rs, ok := cfg.Store.(*RedisStore); ok && rs.nilClient() {
		return nil, fmt.Errorf("%w: the RedisStore's client is a nil %T", ErrNoStore, rs.client)
	}
	switch cfg.FailMode {
	case FailOpen, FailClosed, FailLocal:
	case 0:
		return nil, ErrFailModeUnset
	default:
		return nil, fmt.Errorf("%w (got %d)", ErrInvalidFailMode, int(cfg.FailMode))
	}
	defaulted := []bool{cfg.Name == ""}
	for _, nl := range cfg.Extra {
		defaulted = append(defaulted, nl.Name == "")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Limit.String()
	}
	if cfg.FailMode != FailLocal {
		cfg.Instances = 0
	} else if cfg.Instances == 0 {
		return nil, fmt.Errorf("%w: FailLocal needs Config.Instances, the number of app instances sharing the limit", ErrInvalidConfig)
	}
	named := append([]NamedLimit{{Name: cfg.Name, Limit: cfg.Limit}}, cfg.Extra...)
	set, err := newPolicySet(named, max(0, cfg.Instances))
	if err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 || cfg.BreakerCooldown < 0 || cfg.BreakerFailures < 0 || cfg.MaxInFlight < 0 || cfg.LogInterval < 0 || cfg.Instances < 0 {
		return nil, fmt.Errorf("%w: Timeout, Instances, BreakerFailures, BreakerCooldown, MaxInFlight and LogInterval must not be negative", ErrInvalidConfig)
	}
	if cfg.BreakerCooldown > time.Second {
		return nil, fmt.Errorf("%w: BreakerCooldown %v exceeds 1s; a recovered store would stay unused too long", ErrInvalidConfig, cfg.BreakerCooldown)
	}
	l := &Limiter{
		store:       cfg.Store,
		name:        cfg.Name,
		set:         set,
		perLimit:    limitSets{extra: cfg.Extra, name: cfg.Name, instances: cfg.Instances},
		mode:        cfg.FailMode,
		timeout:     orDefault(cfg.Timeout, DefaultTimeout),
		maxInFlight: int64(orDefault(cfg.MaxInFlight, DefaultMaxInFlight)),
		observer:    cfg.Observer,
		report: reporter{policy: cfg.Name, mode: cfg.FailMode, onError: cfg.OnError,
			logger: cmp.Or(cfg.Logger, slog.Default()), interval: int64(orDefault(cfg.LogInterval, DefaultLogInterval))},
	}
	l.breakers.one.threshold = int64(orDefault(cfg.BreakerFailures, DefaultBreakerFailures))
	l.breakers.one.cooldown = int64(orDefault(cfg.BreakerCooldown, DefaultBreakerCooldown))
	start := time.Now()
	l.clock = func() int64 { return int64(time.Since(start)) }
	l.mem, _ = cfg.Store.(*MemoryStore)
	l.calls = resolveCalls(cfg.Store)
	if rs, ok := cfg.Store.(*RedisStore); ok {
		if rs.split {
			l.breakers.node = rs.node
		}
	}
	if cfg.DenyCacheSize < -1 {
		return nil, fmt.Errorf("%w: DenyCacheSize %d; use -1 to disable", ErrInvalidConfig, cfg.DenyCacheSize)
	}
	if l.mem == nil && cfg.DenyCacheSize != -1 {
		l.denials = newDenyCache(orDefault(cfg.DenyCacheSize, defaultDenyCacheSize))
	}
	if cfg.FailMode == FailLocal {
		if cfg.LocalMaxKeys < 0 {
			return nil, fmt.Errorf("%w: LocalMaxKeys %d is negative", ErrInvalidConfig, cfg.LocalMaxKeys)
		}
		l.local = NewMemoryStore(WithMaxKeys(orDefault(cfg.LocalMaxKeys, defaultLocalMaxKeys)))
	}
	if r, ok := cfg.Store.(registrar); ok {
		if err := r.policyNames().claim(l, set.policies, defaulted); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// defaultLocalMaxKeys bounds FailLocal's buckets unless LocalMaxKeys says.
const defaultLocalMaxKeys = 1 << 16

// localLimit is lim shared by instances: the same rate over instances times
// the period (exact, no rounding), and the burst divided, at least 1.
func localLimit(lim Limit, instances int) (Limit, error) {
	if lim.Period > time.Duration(1<<62)/time.Duration(instances) {
		return Limit{}, fmt.Errorf("%w: Period × Instances overflows", ErrInvalidConfig)
	}
	ll := Limit{Rate: lim.Rate, Period: lim.Period * time.Duration(instances), Burst: max(1, lim.Capacity()/instances)}
	if err := ll.validate(); err != nil {
		return Limit{}, fmt.Errorf("FailLocal limit (Limit / Instances): %w", err)
	}
	return ll, nil
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
func (l *Limiter) Name() string { return l.name }

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
	return l.take(ctx, key, 1, l.set) // AllowN's body: small enough to inline
}

// AllowN decides whether key may spend n tokens now, and takes them if so.
// A denied request takes nothing.
//
// The error is non-nil only for a caller's mistake: an empty key
// (ErrEmptyKey), n < 1 (ErrInvalidCost) or n above the burst
// (ErrCostTooHigh). When the store cannot decide within Config.Timeout, the
// FailMode does, and the Result says Degraded.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Result, error) {
	return l.take(ctx, key, n, l.set)
}

// AllowLimit is AllowN under lim instead of Config.Limit, in the same
// buckets (the same Name): for a limit known only per request, such as a
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
	set, err := l.setFor(lim)
	if err != nil {
		return Result{}, err
	}
	return l.take(ctx, key, n, set)
}

// setFor returns the policy set deciding under lim.
func (l *Limiter) setFor(lim Limit) (*policySet, error) {
	if lim == l.set.limits[0] {
		return l.set, nil
	}
	return l.perLimit.get(lim)
}

// take is AllowN under set. Allow and AllowN inline into their callers,
// so a memory decision under one limit crosses one frame, this one, which
// builds the Result (13 words) in place; every other case goes on in
// takeStore.
func (l *Limiter) take(ctx context.Context, key string, n int, set *policySet) (Result, error) {
	if l.mem == nil || len(set.policies) > 1 {
		return l.takeStore(ctx, key, n, set)
	}
	if key == "" || n < 1 || n > set.minCap {
		return Result{}, checkCall(key, n, set)
	}
	// Arguments are checked: no I/O, no failure, no guard.
	d := l.mem.take1(l.subject(key), n, &set.policies[0])
	if l.observer != nil {
		l.observe(ctx, opTake, DecisionEvent{Allowed: d.allowed})
	}
	return Result{Allowed: d.allowed, Limit: set.limits[0], Name: l.name, Remaining: int(d.remaining), RetryAfter: d.retryAfter, ResetAfter: d.resetAfter}, nil
}

// takeStore is take for every other case.
func (l *Limiter) takeStore(ctx context.Context, key string, n int, set *policySet) (Result, error) {
	if err := checkCall(key, n, set); err != nil {
		return Result{}, err
	}
	// Keys of any length cost bounded memory in every store and cache.
	key = l.subject(key)
	if l.mem != nil {
		// Arguments are checked above: no I/O, no failure, no guard.
		each := make([]Outcome, len(set.policies))
		r := l.result(l.mem.take(key, n, set.policies, each), each, set)
		if l.observer != nil {
			l.observe(ctx, opTake, DecisionEvent{Allowed: r.Allowed})
		}
		return r, nil
	}
	var each []Outcome
	if len(set.policies) > 1 {
		each = make([]Outcome, len(set.policies))
	}
	// One deadline for the whole decision, whatever it waits on; the
	// caller's cancellation never shortens it (see Config.Timeout).
	start := time.Now()
	if l.denials == nil {
		return l.remote(ctx, opTake, key, n, set, each, start), nil
	}
	lim := set.limits[0]
	sent := l.clock()
	r, wait, state := l.denials.lookup(key, n, lim, sent)
	if state == cacheWait {
		// Another caller is asking the store about this key: its answer
		// will very likely decide ours too.
		t := time.NewTimer(l.timeout)
		select {
		case <-wait:
			t.Stop()
		case <-t.C:
			return l.degrade(ctx, l.breakers.forKey(key), opTake, key, n, set, ErrTimeout, start), nil
		}
		sent = l.clock()
		r, _, state = l.denials.lookup(key, n, lim, sent)
		if state == cacheWait {
			state = cacheMiss
		}
	}
	if state == cacheDeny {
		if l.observer != nil {
			l.observe(ctx, opTake, DecisionEvent{Cached: true})
		}
		return r, nil
	}
	r = l.remote(ctx, opTake, key, n, set, each, start)
	if r.Degraded {
		if state == cacheProbe {
			l.denials.settle(key)
		}
	} else {
		l.denials.record(key, n, lim, sent, r, state == cacheProbe)
	}
	return r, nil
}

// Peek reports key's state for a request of cost n without taking
// anything: Result.Allowed says whether AllowN(ctx, key, n) would be
// allowed now, and Remaining, RetryAfter and ResetAfter are what it would
// answer had it been denied. One store round trip, never a write; for a
// status endpoint, or the headers of a request that is not limited. Store
// trouble is decided as for AllowN (FailOpen answers allowed), taking
// nothing. The store must implement Peeker, as both of this package's do.
func (l *Limiter) Peek(ctx context.Context, key string, n int) (Result, error) {
	return l.apply(ctx, opPeek, key, n, l.set)
}

// Refund gives n tokens back to key's bucket under every limit, each
// capped at its burst, in one atomic store call: for a request that should
// not count after all (see nethttp's WithCountIf), or one that used less
// than it took. The Result is the bucket's state after the refund. The
// error is non-nil only for a caller's mistake, as for AllowN; a refund
// the store could not make is Result.Degraded, reported like any degraded
// decision (with FailLocal, the in-process bucket gets it). Refunding what
// was never taken only fills the bucket up to its burst: the limit never
// admits more than it would have had the refunded requests never been
// made. A refund forgets this instance's cached denial of key; other
// instances' cached denials run to their end (they only ever deny).
func (l *Limiter) Refund(ctx context.Context, key string, n int) (Result, error) {
	return l.apply(ctx, opRefund, key, n, l.set)
}

// PeekLimit is Peek under lim instead of Config.Limit, as AllowLimit is
// AllowN: what AllowLimit(ctx, key, n, lim) would answer now.
func (l *Limiter) PeekLimit(ctx context.Context, key string, n int, lim Limit) (Result, error) {
	set, err := l.setFor(lim)
	if err != nil {
		return Result{}, err
	}
	return l.apply(ctx, opPeek, key, n, set)
}

// RefundLimit is Refund under lim instead of Config.Limit: it gives back
// what AllowLimit(ctx, key, n, lim) took, capped at lim's burst.
func (l *Limiter) RefundLimit(ctx context.Context, key string, n int, lim Limit) (Result, error) {
	set, err := l.setFor(lim)
	if err != nil {
		return Result{}, err
	}
	return l.apply(ctx, opRefund, key, n, set)
}

// apply runs Peek and Refund.
func (l *Limiter) apply(ctx context.Context, op int, key string, n int, set *policySet) (Result, error) {
	if err := checkCall(key, n, set); err != nil {
		return Result{}, err
	}
	key = l.subject(key)
	var each []Outcome
	if len(set.policies) > 1 {
		each = make([]Outcome, len(set.policies))
	}
	if l.mem != nil {
		return l.result(l.mem.apply(op, key, n, set.policies, each), each, set), nil
	}
	if !l.calls.supports(op) {
		return Result{}, unsupported(l.store, op)
	}
	r := l.remote(ctx, op, key, n, set, each, time.Now())
	if op == opRefund && l.denials != nil {
		// After the refund answered: see denyCache.forget.
		l.denials.forget(key, l.clock(), int64(l.timeout))
	}
	return r, nil
}

// subject is the key as the stores, caches and fallback keep it: a digest
// when it is long (bounded memory), or, for Redis, when it holds what
// could break the Cluster hash tag.
func (l *Limiter) subject(key string) string {
	// The memory store takes any byte in a subject: only a long key is
	// digested, and a key starting with '~' too (hashSubject), so that no
	// key spells another's digest.
	if l.mem != nil && len(key) <= maxRawSubject && key[0] != '~' {
		return key
	}
	return hashSubject(key)
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

// observe tells the Observer (not nil) about a decision: a take, never a
// peek or a refund, which decide nothing.
func (l *Limiter) observe(ctx context.Context, op int, e DecisionEvent) {
	if op != opTake {
		return
	}
	e.Policy = l.name
	if !e.Allowed {
		e.DryRun = isDryRun(ctx)
	}
	l.observer.Decision(e)
}

// remote asks the store to take, peek or refund (op), through the breaker
// of the node deciding key, by the decision's deadline: Timeout from start.
func (l *Limiter) remote(ctx context.Context, op int, key string, n int, set *policySet, each []Outcome, start time.Time) Result {
	br := l.breakers.forKey(key)
	call, probe := br.allow(l.clock())
	if !call {
		return l.degrade(ctx, br, op, key, n, set, ErrCircuitOpen, time.Time{})
	}
	// The caller's values, never its cancellation or deadline.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(l.timeout))
	defer cancel()
	var o Outcome
	var err error
	if l.calls.bounded() {
		o, err = l.calls.call(ctx, op, key, n, set.policies, each, l.maxInFlight)
	} else {
		o, err = l.callBounded(ctx, op, key, n, set.policies, each)
	}
	if errors.Is(err, ErrOverloaded) {
		br.release(probe)
		return l.degrade(ctx, br, op, key, n, set, ErrOverloaded, time.Time{})
	}
	if err != nil {
		dialErr, last := l.calls.why()
		// A caller stops waiting by its own timer, a hair before its
		// context reports the deadline.
		call := callOf(err)
		timedOut := ctx.Err() != nil || (call == 0 && errors.Is(err, context.DeadlineExceeded))
		err = failureCause(err, timedOut, dialErr, last)
		switch {
		case slotMoving(err):
			// The node is healthy; one slot is on the move. Its other
			// slots' subjects must not be degraded for it.
			br.release(probe)
		case timedOut && last == nil && dialErr == nil && l.calls.bounded():
			// The store's calls succeed; this decision waited too long
			// for one (a burst, or this process starved of CPU). It is
			// degraded, but no reason to stop calling the store: only
			// failing calls open the breaker.
			br.release(probe)
		default:
			if br.failedCall(probe, l.clock(), call) && l.observer != nil {
				l.observer.BreakerChange(l.name, true)
			}
		}
		return l.degrade(ctx, br, op, key, n, set, err, start)
	}
	if br.success(probe) {
		l.recovered()
	}
	r := l.result(o, each, set)
	if l.observer != nil {
		l.observe(ctx, op, DecisionEvent{Allowed: r.Allowed, Latency: time.Since(start)})
	}
	return r
}

// slotMoving reports a Redis Cluster answer about one slot being moved
// (TRYAGAIN while its keys are split between two nodes, or a redirection
// go-redis did not follow), not about the node's health.
func slotMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// callBounded is call for a store that may not honour its context's
// deadline: on a goroutine of its own, returning by that deadline whatever
// the store does. The goroutine fills its own outcomes, never each after
// we left.
func (l *Limiter) callBounded(ctx context.Context, op int, key string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	type answer struct {
		o    Outcome
		err  error
		each []Outcome
	}
	if l.inflight.Add(1) > l.maxInFlight {
		l.inflight.Add(-1)
		return Outcome{}, ErrOverloaded
	}
	done := make(chan answer, 1)
	go func() {
		defer l.inflight.Add(-1) // counted until the store returns, whenever that is
		var mine []Outcome
		if each != nil {
			mine = make([]Outcome, len(each))
		}
		o, err := l.calls.call(ctx, op, key, n, policies, mine, 0)
		done <- answer{o, err, mine}
	}()
	select {
	case a := <-done:
		copy(each, a.each)
		return a.o, a.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// degrade decides by FailMode because the store could not, and reports
// why; start is when the store was asked (zero: it was not).
func (l *Limiter) degrade(ctx context.Context, br *breaker, op int, key string, n int, set *policySet, cause error, start time.Time) Result {
	r := l.decideDegraded(br, op, key, n, set, cause)
	if l.observer != nil {
		var latency time.Duration
		if !start.IsZero() {
			latency = time.Since(start)
		}
		l.observe(ctx, op, DecisionEvent{Allowed: r.Allowed, Degraded: true, Latency: latency, Err: cause})
	}
	return r
}

// Reset makes key's bucket full again (for example after a successful
// login). It needs a store implementing Resetter, as both of this
// package's stores do.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	key = l.subject(key)
	if l.local != nil {
		_ = l.local.Reset(ctx, key, l.set.local.policies)
	}
	r, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("%w: store %T cannot reset", ErrInvalidConfig, l.store)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := r.Reset(ctx, key, l.set.policies)
	if l.denials != nil {
		l.denials.forget(key, l.clock(), int64(l.timeout))
	}
	return err
}

func (l *Limiter) result(o Outcome, each []Outcome, set *policySet) Result {
	r := Result{
		Allowed:    o.Allowed,
		Limit:      set.limits[o.Policy],
		Name:       set.policies[o.Policy].Name,
		Remaining:  int(o.Remaining),
		RetryAfter: o.RetryAfter,
		ResetAfter: o.ResetAfter,
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

func (l *Limiter) decideDegraded(br *breaker, op int, key string, n int, set *policySet, cause error) Result {
	l.report.degradedBy(cause, l.clock())
	switch {
	case l.mode == FailOpen || (op == opRefund && l.mode == FailClosed):
		return Result{Allowed: true, Limit: set.limits[0], Name: l.name, Degraded: true}
	case l.mode == FailClosed:
		retry := br.retryIn(l.clock())
		if retry <= 0 {
			retry = time.Duration(br.cooldown)
		}
		return Result{Limit: set.limits[0], Name: l.name, RetryAfter: retry, Degraded: true}
	}
	local := set.local
	if n > local.minCap {
		// More than an instance's share could ever hold: deny, take
		// nothing; a refund of it is capped at the share anyway.
		n = local.minCap
		if op != opRefund {
			return Result{Limit: local.limits[0], Name: l.name, RetryAfter: local.limits[0].Window(), Degraded: true, Fallback: true}
		}
	}
	var each []Outcome
	if len(local.policies) > 1 {
		each = make([]Outcome, len(local.policies))
	}
	r := l.result(l.local.apply(op, key, n, local.policies, each), each, local)
	r.Degraded, r.Fallback = true, true
	return r
}

// recovered notes a closed breaker: the observer always, the log at most
// once per interval.
func (l *Limiter) recovered() {
	if l.observer != nil {
		l.observer.BreakerChange(l.name, false)
	}
	l.report.recovered(l.clock())
}
