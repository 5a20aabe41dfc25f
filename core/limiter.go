package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
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
	// Timeout bounds one store decision, whatever the Redis client's own
	// timeouts and retries; past it, FailMode decides. Default 50ms.
	Timeout time.Duration
	// Instances is the number of app instances sharing the limit. Required
	// with FailLocal, whose in-process buckets hold Limit / Instances (rate
	// and burst; the burst is at least 1). Ignored otherwise.
	Instances int
	// LocalMaxKeys bounds FailLocal's in-process buckets (see
	// WithMaxKeys), so a flood of new keys during an outage costs bounded
	// memory. Default 65536 (about 10 MB).
	LocalMaxKeys int
	// BreakerFailures is how many consecutive store failures open the
	// circuit breaker. Default 3.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker keeps the store uncalled
	// before one probe; at most 1s. Default 500ms.
	BreakerCooldown time.Duration
	// MaxInFlight bounds store decisions still running (a stalled Redis keeps
	// them running past Timeout); beyond it FailMode decides at once.
	// Default 4096.
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
	mem         *MemoryStore // Store, when it is one: decided in place, no timeout guard
	inline      bool         // Store honours context deadlines: no worker hop
	limit       Limit
	name        string
	limits      []Limit // Limit, then Extra, index-aligned with policies
	policies    []Policy
	minCapacity int
	mode        FailMode
	timeout     time.Duration
	maxInFlight int64
	inflight    atomic.Int64
	breaker     breaker

	denials     *denyCache   // nil when disabled
	local       *MemoryStore // FailLocal's buckets
	localLimits []Limit      // limits / Instances, aligned with policies
	localPolicy []Policy
	localMinCap int

	observer        Observer
	onError         func(error)
	logger          *slog.Logger
	logInterval     int64 // ns
	lastLog         atomic.Int64
	lastRecoveryLog atomic.Int64
	degraded        atomic.Int64 // degraded decisions since the last log line
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
	switch cfg.FailMode {
	case FailOpen, FailClosed, FailLocal:
	case 0:
		return nil, ErrFailModeUnset
	default:
		return nil, fmt.Errorf("%w (got %d)", ErrInvalidFailMode, int(cfg.FailMode))
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Limit.String()
	}
	named := append([]NamedLimit{{Name: cfg.Name, Limit: cfg.Limit}}, cfg.Extra...)
	policies, err := Policies(named...)
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
		limit:       cfg.Limit,
		name:        cfg.Name,
		policies:    policies,
		mode:        cfg.FailMode,
		timeout:     orDefault(cfg.Timeout, DefaultTimeout),
		maxInFlight: int64(orDefault(cfg.MaxInFlight, DefaultMaxInFlight)),
		onError:     cfg.OnError,
		observer:    cfg.Observer,
		logger:      cfg.Logger,
		logInterval: int64(orDefault(cfg.LogInterval, DefaultLogInterval)),
	}
	l.breaker.threshold = int64(orDefault(cfg.BreakerFailures, DefaultBreakerFailures))
	l.breaker.cooldown = int64(orDefault(cfg.BreakerCooldown, DefaultBreakerCooldown))
	if l.logger == nil {
		l.logger = slog.Default()
	}
	l.mem, _ = cfg.Store.(*MemoryStore)
	if dh, ok := cfg.Store.(deadlineHonoring); ok {
		l.inline = dh.honorsDeadline()
	}
	if cfg.DenyCacheSize < -1 {
		return nil, fmt.Errorf("%w: DenyCacheSize %d; use -1 to disable", ErrInvalidConfig, cfg.DenyCacheSize)
	}
	if l.mem == nil && cfg.DenyCacheSize != -1 {
		l.denials = newDenyCache(orDefault(cfg.DenyCacheSize, defaultDenyCacheSize))
	}
	l.minCapacity = cfg.Limit.Capacity()
	for _, nl := range named {
		l.limits = append(l.limits, nl.Limit)
		l.minCapacity = min(l.minCapacity, nl.Limit.Capacity())
	}

	if cfg.FailMode == FailLocal {
		if cfg.Instances == 0 {
			return nil, fmt.Errorf("%w: FailLocal needs Config.Instances, the number of app instances sharing the limit", ErrInvalidConfig)
		}
		if cfg.LocalMaxKeys < 0 {
			return nil, fmt.Errorf("%w: LocalMaxKeys %d is negative", ErrInvalidConfig, cfg.LocalMaxKeys)
		}
		l.local = NewMemoryStore(WithMaxKeys(orDefault(cfg.LocalMaxKeys, defaultLocalMaxKeys)))
		l.localMinCap = int(^uint(0) >> 1)
		for i, nl := range named {
			ll, err := localLimit(nl.Limit, cfg.Instances)
			if err != nil {
				return nil, err
			}
			l.localLimits = append(l.localLimits, ll)
			l.localPolicy = append(l.localPolicy, ll.policy(policies[i].Name))
			l.localMinCap = min(l.localMinCap, ll.Capacity())
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

// Limit returns the limiter's limit.
func (l *Limiter) Limit() Limit { return l.limit }

// Name returns the limiter's policy name.
func (l *Limiter) Name() string { return l.name }

// Limits returns the limiter's limits with their policy names: Limit and
// Name first, then Extra, in the order decisions report them.
func (l *Limiter) Limits() []NamedLimit {
	ls := make([]NamedLimit, len(l.limits))
	for i, lim := range l.limits {
		ls[i] = NamedLimit{Name: l.policies[i].Name, Limit: lim}
	}
	return ls
}

// FailMode returns what the limiter does when its store cannot decide.
func (l *Limiter) FailMode() FailMode { return l.mode }

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether key may spend n tokens now, and takes them if so.
// A denied request takes nothing.
//
// The error is non-nil only for a caller's mistake: an empty key
// (ErrEmptyKey), n < 1 (ErrInvalidCost) or n above the burst
// (ErrCostTooHigh). When the store cannot decide within Config.Timeout, the
// FailMode does, and the Result says Degraded.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Result, error) {
	switch {
	case key == "":
		return Result{}, ErrEmptyKey
	case n < 1:
		return Result{}, fmt.Errorf("%w (got %d)", ErrInvalidCost, n)
	case n > l.minCapacity:
		return Result{}, fmt.Errorf("%w (cost %d, burst %d)", ErrCostTooHigh, n, l.minCapacity)
	}
	if l.mem != nil {
		// Arguments are checked above: no I/O, no failure, no guard.
		if len(l.policies) > 1 {
			each := make([]Outcome, len(l.policies))
			r := l.result(l.mem.take(key, n, l.policies, each), each, l.limits)
			l.observeMemory(r.Allowed)
			return r, nil
		}
		// Built in the return statement, not copied through a local: a
		// Result is 13 words.
		d := l.mem.take1(key, n, &l.policies[0])
		l.observeMemory(d.allowed)
		return Result{Allowed: d.allowed, Limit: l.limit, Name: l.name, Remaining: int(d.remaining), RetryAfter: d.retryAfter, ResetAfter: d.resetAfter}, nil
	}
	var each []Outcome
	if len(l.policies) > 1 {
		each = make([]Outcome, len(l.policies))
	}
	if l.denials == nil {
		return l.remote(ctx, key, n, each), nil
	}
	sent := monoNow()
	r, wait, state := l.denials.lookup(key, n, sent)
	if state == cacheWait {
		// Another caller is asking the store about this key: its answer
		// will very likely decide ours too.
		t := time.NewTimer(l.timeout)
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		sent = monoNow()
		r, _, state = l.denials.lookup(key, n, sent)
		if state == cacheWait {
			state = cacheMiss
		}
	}
	if state == cacheDeny {
		if l.observer != nil {
			l.observer.Decision(DecisionEvent{Policy: l.name, Cached: true})
		}
		return r, nil
	}
	r = l.remote(ctx, key, n, each)
	if r.Degraded {
		if state == cacheProbe {
			l.denials.settle(key)
		}
	} else {
		l.denials.record(key, n, sent, r, state == cacheProbe)
	}
	return r, nil
}

func (l *Limiter) observeMemory(allowed bool) {
	if l.observer != nil {
		l.observer.Decision(DecisionEvent{Policy: l.name, Allowed: allowed})
	}
}

// remote asks the store, through the breaker and the timeout guard.
func (l *Limiter) remote(ctx context.Context, key string, n int, each []Outcome) Result {
	call, probe := l.breaker.allow()
	if !call {
		return l.degrade(key, n, ErrCircuitOpen)
	}
	if l.inflight.Add(1) > l.maxInFlight {
		l.inflight.Add(-1)
		l.breaker.release(probe)
		return l.degrade(key, n, ErrOverloaded)
	}
	var start time.Time
	if l.observer != nil {
		start = time.Now()
	}
	var o Outcome
	var err error
	if l.inline {
		o, err = takeInline(ctx, l.timeout, l.store, key, n, l.policies, each)
		l.inflight.Add(-1)
	} else {
		o, err = takeBounded(ctx, l.timeout, &l.inflight, l.store, key, n, l.policies, each)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			// The caller gave up; that says nothing about the store.
			l.breaker.release(probe)
		} else if l.breaker.failure(probe) && l.observer != nil {
			l.observer.BreakerChange(l.name, true)
		}
		return l.degradeAfter(key, n, err, start)
	}
	if l.breaker.success(probe) {
		l.recovered()
	}
	r := l.result(o, each, l.limits)
	if l.observer != nil {
		l.observer.Decision(DecisionEvent{Policy: l.name, Allowed: r.Allowed, Latency: time.Since(start)})
	}
	return r
}

// degradeAfter is degrade for a store call that began at start.
func (l *Limiter) degradeAfter(key string, n int, cause error, start time.Time) Result {
	r := l.decideDegraded(key, n, cause)
	if l.observer != nil {
		l.observer.Decision(DecisionEvent{Policy: l.name, Allowed: r.Allowed, Degraded: true, Latency: time.Since(start), Err: cause})
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
	if l.local != nil {
		_ = l.local.Reset(ctx, key, l.localPolicy)
	}
	if l.denials != nil {
		l.denials.forget(key)
	}
	r, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("%w: store %T cannot reset", ErrInvalidConfig, l.store)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return r.Reset(ctx, key, l.policies)
}

func (l *Limiter) result(o Outcome, each []Outcome, limits []Limit) Result {
	r := Result{
		Allowed:    o.Allowed,
		Limit:      limits[o.Policy],
		Name:       l.policies[o.Policy].Name,
		Remaining:  int(o.Remaining),
		RetryAfter: o.RetryAfter,
		ResetAfter: o.ResetAfter,
	}
	if each != nil {
		r.Policies = make([]PolicyResult, len(each))
		for i, e := range each {
			r.Policies[i] = PolicyResult{
				Name:       l.policies[i].Name,
				Limit:      limits[i],
				Remaining:  int(e.Remaining),
				RetryAfter: e.RetryAfter,
				ResetAfter: e.ResetAfter,
			}
		}
	}
	return r
}

// degrade decides by FailMode because the store could not, and reports why.
func (l *Limiter) degrade(key string, n int, cause error) Result {
	r := l.decideDegraded(key, n, cause)
	if l.observer != nil {
		l.observer.Decision(DecisionEvent{Policy: l.name, Allowed: r.Allowed, Degraded: true, Err: cause})
	}
	return r
}

func (l *Limiter) decideDegraded(key string, n int, cause error) Result {
	l.report(cause)
	switch l.mode {
	case FailOpen:
		return Result{Allowed: true, Limit: l.limit, Name: l.name, Degraded: true}
	case FailClosed:
		retry := l.breaker.retryIn()
		if retry <= 0 {
			retry = time.Duration(l.breaker.cooldown)
		}
		return Result{Limit: l.limit, Name: l.name, RetryAfter: retry, Degraded: true}
	}
	if n > l.localMinCap {
		// More than an instance's share could ever hold: deny, take nothing.
		return Result{Limit: l.localLimits[0], Name: l.name, RetryAfter: l.localLimits[0].Window(), Degraded: true, Fallback: true}
	}
	var each []Outcome
	if len(l.localPolicy) > 1 {
		each = make([]Outcome, len(l.localPolicy))
	}
	r := l.result(l.local.take(key, n, l.localPolicy, each), each, l.localLimits)
	r.Degraded, r.Fallback = true, true
	return r
}

// recovered notes a closed breaker: the observer always, the log at most
// once per interval, with the degraded decisions not yet logged.
func (l *Limiter) recovered() {
	if l.observer != nil {
		l.observer.BreakerChange(l.name, false)
	}
	if !due(&l.lastRecoveryLog, l.logInterval) {
		return
	}
	l.logger.Info("ratelimit: store answering again; decisions no longer degraded",
		"policy", l.name, "degraded_since_last_log", l.degraded.Swap(0))
}

// report tells OnError every time and the log at most once per interval.
func (l *Limiter) report(cause error) {
	if l.onError != nil {
		l.onError(fmt.Errorf("core: limiter %q: store unavailable, FailMode %v decided: %w", l.name, l.mode, cause))
	}
	l.degraded.Add(1)
	if !due(&l.lastLog, l.logInterval) {
		return
	}
	l.logger.Warn("ratelimit: store unavailable; decisions degraded",
		"policy", l.name, "fail_mode", l.mode.String(), "degraded", l.degraded.Swap(0), "cause", cause.Error())
}

// due reports whether a line rate-limited to one per interval (ns) may be
// logged now, and if so claims the slot: exactly one caller wins it.
func due(last *atomic.Int64, interval int64) bool {
	now := monoNow()
	prev := last.Load()
	return (prev == 0 || now-prev >= interval) && last.CompareAndSwap(prev, now)
}
