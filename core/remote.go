package core

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeCached is a take from a remote store through the denial cache: a
// key the store denied is denied here to the callers that arrived before
// its bucket could serve them, and callers on a key found short wait for
// the next answer rather than each sending their own call (see denyCache).
func (l *Limiter) takeCached(ctx context.Context, key string, n int, set *policySet, each []Outcome) Result {
	// One deadline for the whole decision, whatever it waits on; the
	// caller's cancellation never shortens it (see Config.Timeout).
	start := time.Now()
	lim := set.limits[0]
	arrival := l.clock()
	var t *time.Timer
	for {
		now := l.clock()
		r, wake, at, state := l.denials.lookup(key, n, lim, arrival, now)
		switch state {
		case cacheDeny:
			if t != nil {
				t.Stop()
			}
			if l.observer != nil {
				l.observe(ctx, opTake, DecisionEvent{Cached: true})
			}
			return r
		case cacheWait:
			// Another caller is asking the store about this key: its
			// answer will very likely decide ours too.
			wait := l.timeout - time.Since(start)
			if at-now < int64(wait) {
				wait = time.Duration(at - now)
			}
			if t == nil {
				t = time.NewTimer(wait)
			} else {
				t.Reset(wait)
			}
			select {
			case <-wake:
				t.Stop()
			case <-t.C:
				if time.Since(start) >= l.timeout {
					return l.degrade(ctx, l.breakers.forKey(key), opTake, key, n, set, ErrTimeout, start)
				}
			}
			continue
		}
		if t != nil {
			t.Stop()
		}
		r = l.remote(ctx, opTake, key, n, set, each, start)
		if !r.Degraded {
			l.denials.record(key, n, lim, now, l.clock(), r, state == cacheProbe)
		} else if state == cacheProbe {
			l.denials.settle(key, lim, now)
		}
		return r
	}
}

// observe tells the Observer (not nil) about a decision: a take, never a
// peek or a refund, which decide nothing.
func (l *Limiter) observe(ctx context.Context, op int, e DecisionEvent) {
	if op != opTake {
		return
	}
	e.Policy = l.Name()
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
	deadline := start.Add(l.timeout)
	o, err := l.store.call(withoutCancel(ctx), deadline, op, key, n, set.policies, each, l.bound)
	if errors.Is(err, ErrOverloaded) {
		br.release(probe)
		return l.degrade(ctx, br, op, key, n, set, ErrOverloaded, time.Time{})
	}
	if err != nil {
		dialErr, last, told := l.store.why()
		// A caller stops waiting by its own timer, a hair before the
		// clock reads the deadline.
		call := callOf(err)
		timedOut := !time.Now().Before(deadline) || (call == 0 && errors.Is(err, context.DeadlineExceeded))
		err = failureCause(err, timedOut, dialErr, last)
		switch {
		case slotMoving(err):
			// The node is healthy; one slot is on the move. Its other
			// slots' subjects must not be degraded for it.
			br.release(probe)
		case timedOut && told && last == nil && dialErr == nil:
			// The store's calls succeed; this decision waited too long
			// for one (a burst, or this process starved of CPU). It is
			// degraded, but no reason to stop calling the store: only
			// failing calls open the breaker.
			br.release(probe)
		default:
			if br.failedCall(probe, l.clock(), call) && l.observer != nil {
				l.observer.BreakerChange(l.Name(), true)
			}
		}
		return l.degrade(ctx, br, op, key, n, set, err, start)
	}
	if br.success(probe) {
		l.recovered()
	}
	r := resultOf(o, each, set)
	if l.observer != nil {
		l.observe(ctx, op, DecisionEvent{Allowed: r.Allowed, Latency: time.Since(start)})
	}
	return r
}

// withoutCancel is ctx's values without its cancellation or deadline;
// a context that can never be cancelled is that already.
func withoutCancel(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// slotMoving reports a Redis Cluster answer about one slot being moved
// (TRYAGAIN while its keys are split between two nodes, or a redirection
// go-redis did not follow), not about the node's health.
func slotMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// degrade decides by FailMode because the store could not, and reports
// why; start is when the store was asked (zero: it was not).
func (l *Limiter) degrade(ctx context.Context, br *breaker, op int, key string, n int, set *policySet, cause error, start time.Time) Result {
	now := l.clock()
	l.report.degradedBy(cause, now)
	r := l.fallback.decide(br, now, op, key, n, set)
	if l.observer != nil {
		var latency time.Duration
		if !start.IsZero() {
			latency = time.Since(start)
		}
		l.observe(ctx, op, DecisionEvent{Allowed: r.Allowed, Degraded: true, Latency: latency, Err: cause})
	}
	return r
}

// recovered notes a closed breaker: the observer always, the log at most
// once per interval.
func (l *Limiter) recovered() {
	if l.observer != nil {
		l.observer.BreakerChange(l.Name(), false)
	}
	l.report.recovered(l.clock())
}
