package core

import (
	"context"
	"time"
)

// Observer watches a Limiter's decisions: metrics, tracing and logs attach
// here without the library importing them (see package
// github.com/sluicehq/ratelimit/metrics for Prometheus, module
// github.com/sluicehq/ratelimit/otel for OpenTelemetry). A Concurrency
// reports to its Observer as a Limiter does. Methods are called on the
// goroutine that made the decision or met the store's failure (a
// request's; for a Concurrency, also its renewal goroutine's) and must
// be fast and safe for concurrent use.
type Observer interface {
	// Decision is called once for every decision AllowN or AllowLimit
	// returns without an error (and, for a Concurrency, every acquire).
	// It is the hook for store failures: a degraded decision's Err says
	// why (errors.Is ErrTimeout, ErrCircuitOpen, ErrOverloaded, or the
	// store's error). Peek and Refund decide nothing and are not reported
	// here (a degraded one says Result.Degraded, and is logged).
	Decision(e DecisionEvent)
	// BreakerChange is called when a circuit breaker opens (the store node
	// stops being called) or closes (a probe succeeded). The breakers are
	// the store's, shared by its limiters: an opening is told once, to the
	// Observer of the limiter whose call opened it, under its policy, and
	// the closing to the same, whoever probed (to the prober's when that
	// limiter was dropped meanwhile: a breaker does not keep it alive).
	BreakerChange(policy string, open bool)
}

// DecisionEvent describes one decision to an Observer.
type DecisionEvent struct {
	Policy   string        // the limiter's policy name (Config.Name)
	Allowed  bool          // the answer
	Degraded bool          // the store could not decide; FailMode did
	Cached   bool          // the local denial cache decided, without the store
	Latency  time.Duration // time spent waiting for the store; 0 when not asked
	Err      error         // why the decision was degraded, else nil
	DryRun   bool          // a refusal under a context from WithDryRun: not enforced
	// Borrowed is a take decided from a slice borrowed from the store
	// (Config.Borrow): in process, or by the call that borrowed it.
	// Lent is the tokens that call borrowed (of each limit), and
	// Returned the unspent tokens of the key's last slice it gave back.
	Borrowed       bool
	Lent, Returned int
	// Instances is, with FailLocal, how many instances its in-process
	// buckets share the limit with: Config.Instances, or the live count
	// learned when that is 0. 0 for the other modes.
	Instances int
}

// WithDryRun returns a copy of ctx marking the decisions made with it as
// a dry run: decided and counted as usual, but their caller lets refused
// requests through, so an Observer sees a refusal with DryRun set (the
// metrics package counts it as would_deny, never denied). Middleware in
// dry-run mode decides with it.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

type dryRunKey struct{}

func isDryRun(ctx context.Context) bool {
	return ctx.Value(dryRunKey{}) != nil
}
