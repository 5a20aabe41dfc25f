package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"weak"

	"github.com/sluicehq/ratelimit/internal/transport"
)

// guard is how every kind of limiter — a Limiter's decisions, a
// Concurrency's acquires, releases and renewals — reaches a store outside
// this process, so that a store failure is one thing whoever meets it
// (DESIGN §2a, "One control plane"):
//
//   - the store's circuit breaker per node, shared by every limiter on
//     the store, which each trips by the same fields;
//   - one bound per store call: Timeout from the call's start, and
//     MaxInFlight calls running in the store (the store enforces both);
//   - one rule for what a failure is and its cause (end);
//   - one fallback per FailMode (fallback);
//   - one report: the Observer (Decision with its Err, BreakerChange) and
//     one log line per interval naming the policy (reporter);
//   - one clock, monotonic and the same for every limiter (the breakers
//     are shared), injectable in tests, for breakers, caches and the log
//     throttle.
//
// A store in this process (a MemoryStore) answers at once and never fails
// a checked call: its limiters call it directly, past the guard.
type guard struct {
	store    storeCalls // Config.Store, resolved once (resolveStore)
	timeout  time.Duration
	bound    int64         // MaxInFlight
	clock    func() int64  // ns, monotonic
	breakers *nodeBreakers // the store's
	trip     trip          // how this limiter's failed calls open them
	fallback fallback
	observer Observer
	report   reporter
}

// guardConfig is what a limiter's config says of its guard: the fields
// Config and ConcurrencyConfig both have, with the same names, meaning
// and defaults.
type guardConfig struct {
	store        Store
	name         string // the policy reports name
	mode         FailMode
	timeout      time.Duration
	failures     int
	cooldown     time.Duration
	maxInFlight  int
	instances    int  // FailLocal
	learns       bool // FailLocal with instances 0 learns the live count (a Limiter's)
	localMaxKeys int
	observer     Observer
	logger       *slog.Logger
}

// minTimeout is the least Timeout accepted: below it every decision would
// be decided by FailMode, whatever the store.
const minTimeout = time.Millisecond

// check rejects what no limiter can run with; what names the config
// ("Config", "ConcurrencyConfig") in errors.
func (cfg *guardConfig) check(what string) error {
	switch cfg.mode {
	case FailOpen, FailClosed, FailLocal:
	case 0:
		return ErrFailModeUnset
	default:
		return fmt.Errorf("%w (got %d)", ErrInvalidFailMode, int(cfg.mode))
	}
	if cfg.mode != FailLocal {
		cfg.instances, cfg.localMaxKeys = 0, 0
	} else if cfg.instances == 0 && !cfg.learns {
		return fmt.Errorf("%w: FailLocal needs %s.Instances, the number of app instances sharing the limit", ErrInvalidConfig, what)
	}
	switch {
	case cfg.timeout < 0 || cfg.cooldown < 0 || cfg.failures < 0 || cfg.maxInFlight < 0 || cfg.instances < 0:
		return fmt.Errorf("%w: %s: Timeout, Instances, BreakerFailures, BreakerCooldown and MaxInFlight must not be negative", ErrInvalidConfig, what)
	case cfg.timeout != 0 && cfg.timeout < minTimeout:
		return fmt.Errorf("%w: %s.Timeout %v is below %v: no store answers that fast, so FailMode would decide every request", ErrInvalidConfig, what, cfg.timeout, minTimeout)
	case cfg.cooldown > time.Second:
		return fmt.Errorf("%w: BreakerCooldown %v exceeds 1s; a recovered store would stay unused too long", ErrInvalidConfig, cfg.cooldown)
	case cfg.localMaxKeys < 0:
		return fmt.Errorf("%w: LocalMaxKeys %d is negative", ErrInvalidConfig, cfg.localMaxKeys)
	}
	return nil
}

// init resolves cfg's store and sets g up for it; cfg is checked.
func (g *guard) init(cfg guardConfig) error {
	store, err := resolveStore(cfg.store)
	if err != nil {
		return err
	}
	*g = guard{
		store:    store,
		timeout:  orDefault(cfg.timeout, DefaultTimeout),
		bound:    int64(orDefault(cfg.maxInFlight, defaultMaxInFlight)),
		clock:    monotonic,
		breakers: store.breakers(),
		trip: trip{
			failures: int64(orDefault(cfg.failures, DefaultBreakerFailures)),
			cooldown: int64(orDefault(cfg.cooldown, defaultBreakerCooldown)),
		},
		fallback: newFallback(cfg.mode, cfg.localMaxKeys, cfg.instances),
		observer: cfg.observer,
		report:   newReporter(cfg),
	}
	if g.breakers == nil {
		g.breakers = new(nodeBreakers) // an in-process store's, never tripped
	}
	g.fallback.cooldown = time.Duration(g.trip.cooldown)
	g.report.timeout, g.report.count = g.timeout, g.fallback.count
	return nil
}

// epoch starts the clock of every guard.
var epoch = time.Now()

// monotonic is the guards' clock: ns since epoch, on the monotonic clock,
// so that the limiters sharing a store's breakers read their times alike.
func monotonic() int64 { return int64(time.Since(epoch)) }

// call makes one store call, f, for subject subj through the guard: past
// the breaker of subj's node, with ctx's values but never its
// cancellation, by deadline (f passes it and g.bound to the store). It
// returns that breaker, for the fallback, and nil when the store
// answered; else why not: ErrCircuitOpen when the breaker kept the store
// uncalled, or the failure's cause (see end). It is the one bracket
// around every store call of every kind of limiter.
func (g *guard) call(ctx context.Context, subj string, deadline time.Time, f func(ctx context.Context) error) (*breaker, error) {
	br := g.breakers.forKey(subj)
	call, probe := br.allow(g.clock())
	if !call {
		return br, ErrCircuitOpen
	}
	return br, g.end(br, probe, f(withoutCancel(ctx)), deadline)
}

// asked reports whether a call that returned err reached the store: not
// when the breaker kept it uncalled or the bound refused it.
func asked(err error) bool {
	return !errors.Is(err, ErrCircuitOpen) && !errors.Is(err, ErrOverloaded)
}

// end records how a store call made through br by deadline went: err nil
// when the store answered. It returns nil then, else the failure's cause,
// for the fallback and the report.
//
// The rule for every limiter: only failing calls count toward the
// breaker. A call that ran out of time while the store shows no failure
// of its own (no fresh dial error, its last call answered) says this one
// waited too long — a burst, this process starved of CPU — and degrades
// it alone; so do ErrOverloaded (no call was made) and a Cluster slot on
// the move (the node is healthy).
func (g *guard) end(br *breaker, probe bool, err error, deadline time.Time) error {
	if err == nil {
		if br.success(probe) {
			opener := g // the prober, when the opener's limiter was dropped
			if w := br.opener.Swap(nil); w != nil {
				opener = cmp.Or(w.Value(), g)
			}
			opener.recovered(br)
		}
		return nil
	}
	if errors.Is(err, ErrOverloaded) {
		br.release(probe)
		return ErrOverloaded
	}
	dialErr, last, told := g.store.why()
	// A caller stops waiting by its own timer, a hair before the clock
	// reads the deadline.
	call := callOf(err)
	timedOut := !time.Now().Before(deadline) || (call == 0 && errors.Is(err, context.DeadlineExceeded))
	err = failureCause(err, timedOut, dialErr, last)
	switch {
	case transport.SlotMoving(err), timedOut && told && last == nil && dialErr == nil:
		br.release(probe)
	default:
		if now := g.clock(); br.failedCall(probe, now, call, g.trip) {
			g.opened(br, err, now)
		}
	}
	return err
}

// opened notes that g's call, failed because of cause, opened br at now:
// once per opening, whatever the number of limiters on the store, its
// Observer hears it under its policy, and the log at most once per
// interval and node. g reports the closing too (recovered), so an
// Observer hears both of a pair, while g's limiter lives (br holds it
// weakly).
func (g *guard) opened(br *breaker, cause error, now int64) {
	w := weak.Make(g)
	br.opener.Store(&w)
	if g.observer != nil {
		g.observer.BreakerChange(g.report.policy, true)
	}
	g.report.opened(br, cause, time.Duration(g.trip.cooldown), now)
}

// recovered notes that a probe closed br, which g opened: the observer
// always, the log at most once per interval.
func (g *guard) recovered(br *breaker) {
	if g.observer != nil {
		g.observer.BreakerChange(g.report.policy, false)
	}
	g.report.recovered(br.node, g.clock())
}

// decided tells the Observer about one decision (an acquire, or a
// Limiter's take), degraded or not; start is when the store was asked
// (zero: it was not).
func (g *guard) decided(ctx context.Context, e DecisionEvent, start time.Time) {
	if g.observer == nil {
		return
	}
	if e.Policy == "" {
		e.Policy = g.report.policy // a Limiter's events name their own (Under)
	}
	if c := g.fallback.count; c != nil {
		e.Instances = c.get()
	}
	if !start.IsZero() {
		e.Latency = time.Since(start)
	}
	if !e.Allowed {
		e.DryRun = isDryRun(ctx)
	}
	g.observer.Decision(e)
}
