package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Charge takes n tokens from key's bucket after the fact — usage counted
// from a response: an LLM's tokens, bytes sent — and is never refused:
// the bucket may go into debt, down to max(Burst, what refills in
// Config.MaxWait) tokens owed (less for a limit counted in tiny units,
// whose bucket owes at most 2^52 of them: see docs/waiting.md); a charge
// beyond that is forgiven (counted in the Observer's WaitEvent.Forgiven),
// and a bucket owing that much already keeps its debt. While the bucket
// owes, AllowN refuses with a RetryAfter until the refill has repaid the
// debt and the request's own cost, and ReserveN books behind the debt.
//
// The Result is the bucket after the charge: Allowed is true, Remaining
// the whole tokens left (0 while it owes), RetryAfter how long until a
// request of one token would be allowed (0 if now). n may exceed the
// burst, by any amount: what the bucket cannot owe is forgiven, never an
// error. The error is non-nil only for a caller's mistake (an empty key,
// n < 1). A charge the store could not record is Result.Degraded; with
// FailLocal the in-process bucket gets it.
func (l *Limiter) Charge(ctx context.Context, key string, n int) (Result, error) {
	base, set := l.base, l.set
	switch {
	case key == "":
		return Result{}, ErrEmptyKey
	case n < 1:
		return Result{}, fmt.Errorf("%w (got %d)", ErrInvalidCost, n)
	}
	// What no bucket can owe is forgiven here, so that the stores never
	// scale a cost beyond exact arithmetic; they forgive the rest.
	x := base.maxWait.Microseconds()
	sent := int(min(int64(n), bucket.ChargeCap(set.policies, x)))
	r := base.run(ctx, bucket.WithArg(bucket.OpCharge, x), key, sent, set)
	r.Allowed = true
	if base.observer != nil {
		base.observeWait(WaitEvent{Charge: true, Booked: true, N: n, Forgiven: int(r.extra) + n - sent, Degraded: r.Degraded})
	}
	return r, nil
}

// Pause makes key's bucket owe at least what refills in d, at most a day,
// so that every instance sharing it waits d before its next token: an
// upstream's Retry-After (nethttp's Transport pauses on a 429 or 503). A
// bucket that owes more already keeps its debt; d ≤ 0 pauses nothing. It
// is never refused; store trouble is decided as for Charge, and the
// Result is the bucket after the pause. The error is non-nil only for an
// empty key.
func (l *Limiter) Pause(ctx context.Context, key string, d time.Duration) (Result, error) {
	l, set := l.base, l.set
	if key == "" {
		return Result{}, ErrEmptyKey
	}
	if d = min(d, maxMaxWait); d <= 0 {
		return Result{}, nil
	}
	return l.run(ctx, bucket.WithArg(bucket.OpPause, d.Microseconds()), key, 1, set), nil
}
