package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// maxMaxWait bounds Config.MaxWait: a day, as an upstream's pause.
const maxMaxWait = 24 * time.Hour

// ErrWaitTooLong is the error (errors.Is) of a WaitN whose wait would pass
// its context's deadline or Config.MaxWait; errors.As finds a *WaitError
// saying how long.
var ErrWaitTooLong = errors.New("core: the wait would be too long")

// ErrUnavailable is the error of a WaitN whose store could not book it,
// under FailClosed.
var ErrUnavailable = errors.New("core: store unavailable (FailClosed): nothing booked")

// WaitError is the error of a WaitN that booked nothing because its wait
// would be too long.
type WaitError struct {
	Wait time.Duration // how long it would have waited, at least
	Max  time.Duration // the most it could wait: Config.MaxWait or until the context's deadline
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("core: would wait %v, more than %v (Config.MaxWait or the context's deadline)", e.Wait, e.Max)
}

// Unwrap returns ErrWaitTooLong.
func (e *WaitError) Unwrap() error { return ErrWaitTooLong }

// A Reservation is n tokens of a key booked by ReserveN: taken now, or
// owed by the bucket until the refill covers them, Delay from now. Its
// methods are safe for concurrent use.
type Reservation struct {
	l     *Limiter   // the base limiter
	set   *policySet // what it was booked under
	key   string
	n     int
	res   Result
	delay time.Duration // the store's answer: how long the booking waits
	act   time.Time     // when to act, on this process's clock
	local bool          // booked in FailLocal's in-process buckets
	done  atomic.Bool
}

// OK reports whether the tokens were booked: false when they would not
// exist within Config.MaxWait (nothing was booked).
func (r *Reservation) OK() bool { return r.res.Allowed }

// Delay returns how long to wait before acting on the reservation,
// counted down from now: 0 when its time has come or it is not OK.
func (r *Reservation) Delay() time.Duration {
	if !r.res.Allowed {
		return 0
	}
	return max(0, time.Until(r.act))
}

// Result returns the decision as AllowN reports one: Allowed is OK;
// Remaining counts the tokens left after the booking (0 while the bucket
// owes); when not OK, RetryAfter is how long until the n tokens exist.
func (r *Reservation) Result() Result { return r.res }

// Cancel gives back what the reservation booked if its time has not come
// on the store's clock, less what bookings made after it counted on (as
// x/time/rate's Cancel), each limit capped at its burst, and forgets this
// instance's cached denial of the key, as Refund does. It acts once: a
// second call, and a call at or after the reservation's time, do nothing;
// a cancel the Redis client re-sends is counted once. The store is asked
// under Config.Timeout with ctx's values, never its cancellation. Store
// trouble is reported as for every decision, not returned: the booking
// then stands (which only ever refuses more). The error is always nil.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.res.Allowed || r.res.extra == 0 || !time.Now().Before(r.act) || !r.done.CompareAndSwap(false, true) {
		return nil
	}
	op := bucket.WithArg(bucket.OpCancel, r.res.extra)
	if r.local {
		r.l.fallback.local.table.Apply(&bucket.Ask{Op: op, Subj: r.l.store.subject(r.key), N: r.n, Policies: r.set.local.policies})
		return nil
	}
	r.l.run(ctx, op, r.key, r.n, r.set)
	return nil
}

// ReserveN books n tokens of key: now if the bucket holds them, else
// against the refill, when they will exist within Config.MaxWait and
// before ctx's deadline, if it has one (the bucket owes them); refused (OK
// false) otherwise, booking nothing. Act
// after the reservation's Delay, or Cancel it. Reservations are served in
// the order they reach the store, across every instance sharing it, by
// one store call on the store's clock (exactly once under the Redis
// client's re-sends). The error is non-nil only for a caller's mistake,
// as for AllowN. When the store cannot decide, FailMode does: FailOpen
// books nothing and lets the caller act now (OK, Delay 0), FailClosed
// refuses, FailLocal books in the in-process bucket. Result.Degraded says
// so.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int) (*Reservation, error) {
	r, _, err := l.base.reserve(ctx, key, n, l.set)
	return r, err
}

// MaxWait returns Config.MaxWait: the longest a reservation may wait.
func (l *Limiter) MaxWait() time.Duration { return l.base.maxWait }

// reserve is ReserveN under set; l is a base. most is how far ahead it
// could book: MaxWait, or less until ctx's deadline.
func (l *Limiter) reserve(ctx context.Context, key string, n int, set *policySet) (_ *Reservation, most time.Duration, _ error) {
	most = l.maxWait
	if dl, ok := ctx.Deadline(); ok {
		most = max(0, min(most, time.Until(dl)))
	}
	if key == "" || n < 1 || n > set.minCap {
		return nil, most, checkCall(key, n, set)
	}
	r := l.run(ctx, bucket.WithArg(bucket.OpReserve, most.Microseconds()), key, n, set)
	answered := time.Now()
	res := &Reservation{l: l, set: set, key: key, n: n, res: r, local: r.Fallback}
	if r.Allowed {
		// Counted from the answer: never earlier than the store's clock says.
		delay := r.RetryAfter
		for _, p := range r.Policies {
			delay = max(delay, p.RetryAfter)
		}
		res.delay, res.act = delay, answered.Add(delay)
		res.res.RetryAfter = 0
		for i := range res.res.Policies {
			res.res.Policies[i].RetryAfter = 0
		}
	}
	if l.observer != nil {
		l.observeWait(WaitEvent{Booked: r.Allowed, N: n, Delay: res.delay, Degraded: r.Degraded})
	}
	return res, most, nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN books n tokens of key (ReserveN) and sleeps until they exist. It
// fails at once, booking nothing, when the wait would pass ctx's deadline
// or Config.MaxWait (errors.Is ErrWaitTooLong; errors.As *WaitError says
// how long), and returns ctx's error when ctx is already done, or ends
// during the sleep: then it cancels its reservation. FailOpen lets it
// through at once while the store cannot decide; FailClosed fails it at
// once (ErrUnavailable); FailLocal books in the in-process bucket, and a
// wait too long there is ErrWaitTooLong, as on the store. Other errors
// are a caller's mistake, as for AllowN.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, most, err := l.base.reserve(ctx, key, n, l.set)
	if err != nil {
		return err
	}
	if !r.OK() {
		if r.res.Degraded && !r.local { // FailClosed; FailLocal's refusal is too long a wait
			return ErrUnavailable
		}
		return &WaitError{Wait: r.res.RetryAfter, Max: most}
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		_ = r.Cancel(ctx)
		return ctx.Err()
	}
}
