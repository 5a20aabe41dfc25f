package core

import (
	"context"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// takeCached is a take (a.Op, under set) from a remote store through
// the denial cache: a key the store denied is denied here to the callers that
// arrived before its bucket could serve them, and callers on a key found
// short wait for the next answer rather than each sending their own call
// (see denyCache).
func (l *Limiter) takeCached(ctx context.Context, a bucket.Ask, set *policySet) Result {
	key, n := a.Subj, a.N
	// One deadline for the whole decision, whatever it waits on; the
	// caller's cancellation never shortens it (see Config.Timeout).
	start := time.Now()
	ca := cacheAsk{subject: key, name: set.policies[0].Name, n: n, lim: set.limits[0]}
	arrival := l.clock()
	var t *time.Timer
	for {
		now := l.clock()
		r, wake, at, state := l.denials.lookup(ca, arrival, now)
		switch state {
		case cacheDeny:
			if t != nil {
				t.Stop()
			}
			if l.observer != nil {
				l.observe(ctx, bucket.OpTake, DecisionEvent{Policy: set.name(), Cached: true})
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
					return l.degrade(ctx, l.breakers.forKey(key), a, set, ErrTimeout, start)
				}
			}
			continue
		}
		if t != nil {
			t.Stop()
		}
		r = l.remote(ctx, a, set, start)
		if !r.Degraded {
			l.denials.record(ca, now, l.clock(), r, state == cacheProbe)
		} else if state == cacheProbe {
			l.denials.settle(ca, now)
		}
		return r
	}
}

// observe tells the Observer (not nil) about a decision: a take, never a
// peek or a refund, which decide nothing.
func (l *Limiter) observe(ctx context.Context, op int, e DecisionEvent) {
	if op == bucket.OpTake {
		l.decided(ctx, e, time.Time{})
	}
}

// remote asks the store a (under set) through the guard, by the
// decision's deadline: Timeout from start.
func (l *Limiter) remote(ctx context.Context, a bucket.Ask, set *policySet, start time.Time) Result {
	l.beat()
	var o bucket.Outcome
	deadline := start.Add(l.timeout)
	a.Deadline, a.Bound = deadline, l.bound
	br, err := l.call(ctx, a.Subj, deadline, func(ctx context.Context) (err error) {
		o, err = l.store.call(ctx, a)
		return err
	})
	if err != nil {
		if !asked(err) {
			start = time.Time{}
		}
		return l.degrade(ctx, br, a, set, err, start)
	}
	r := resultOf(o, a.Each, set)
	if l.observer != nil && a.Op == bucket.OpTake {
		l.decided(ctx, DecisionEvent{Policy: set.name(), Allowed: r.Allowed}, start)
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

// degrade decides a (under set) by FailMode because the store could
// not, and reports why; start is when the store was asked (zero: it was
// not).
func (l *Limiter) degrade(ctx context.Context, br *breaker, a bucket.Ask, set *policySet, cause error, start time.Time) Result {
	now := l.clock()
	l.report.degradedBy("", cause, now)
	r := l.fallback.decide(br, now, a.Op, a.Subj, a.N, set)
	if l.observer != nil && a.Op == bucket.OpTake {
		l.decided(ctx, DecisionEvent{Policy: set.name(), Allowed: r.Allowed, Degraded: true, Err: cause}, start)
	}
	return r
}
