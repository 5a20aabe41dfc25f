package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// Errors returned by New for a configuration that cannot work.
var (
	ErrNoStore         = errors.New("core: Config.Store is nil")
	ErrFailModeUnset   = errors.New("core: Config.FailMode is not set; choose core.FailOpen (allow when the store is down), core.FailClosed (deny with 503) or core.FailLocal (in-process limits of Limit/Instances)")
	ErrInvalidFailMode = errors.New("core: unknown Config.FailMode; choose core.FailOpen, core.FailClosed or core.FailLocal")
	ErrInvalidLimit    = errors.New("core: invalid limit")
	ErrInvalidConfig   = errors.New("core: invalid config")
)

// Errors returned by Allow and AllowN for a caller's mistake. Store trouble is
// never an error: it is what Config.FailMode decides (see Result.Degraded).
var (
	ErrEmptyKey    = errors.New("core: empty key")
	ErrInvalidCost = errors.New("core: cost must be at least 1")
	ErrCostTooHigh = errors.New("core: cost exceeds the bucket capacity (Burst) and could never be allowed")
)

// Errors a store failure is reported with: DecisionEvent.Err, and the
// log line's cause.
var (
	ErrTimeout     = errors.New("core: store decision timed out")
	ErrCircuitOpen = errors.New("core: circuit breaker open; store not called")
	ErrOverloaded  = errors.New("core: too many store decisions in flight")
	ErrBadReply    = errors.New("core: unexpected reply from store")
)

// faults are the errors of internal/bucket's faults, which the stores'
// internals return (see storeErr).
var faults = [...]error{
	bucket.EmptyKey:      ErrEmptyKey,
	bucket.InvalidCost:   ErrInvalidCost,
	bucket.CostTooHigh:   ErrCostTooHigh,
	bucket.InvalidLimit:  ErrInvalidLimit,
	bucket.InvalidConfig: ErrInvalidConfig,
	bucket.Overloaded:    ErrOverloaded,
	bucket.BadReply:      ErrBadReply,
}

// storeErr returns err, a store's internals', as core reports it: a
// bucket.Fault becomes this package's error of the same name — that
// error itself for a bare fault; else err's words after "core: ", which
// errors.Is matches to both.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	if f, ok := err.(bucket.Fault); ok {
		return faults[f]
	}
	var f bucket.Fault
	if !errors.As(err, &f) {
		return err
	}
	return &faultError{faults[f], err}
}

// faultError is an error holding a bucket.Fault (see storeErr).
type faultError struct{ is, err error }

func (e *faultError) Error() string   { return "core: " + e.err.Error() }
func (e *faultError) Unwrap() []error { return []error{e.is, e.err} }

// checkAsk returns the error of an Ask no store may decide (see
// bucket.CheckOp; an OpClear needs a subject and valid policies), nil
// when every store may: a store outside this process checks at its call,
// so that the scripts meet only numbers they compute exactly.
func checkAsk(a *bucket.Ask) error {
	var err error
	switch {
	case a.Op == bucket.OpClear:
		err = bucket.Check(a.Subj, 1, a.Policies)
	case a.Across != nil:
		err = bucket.CheckAcross(a.Op, a.Across, a.Policies, a.Each)
	default:
		err = bucket.CheckOp(a.Op, a.Subj, a.N, a.Policies)
	}
	if kind, _ := bucket.SplitOp(a.Op); err == nil && (kind == bucket.OpLend) != (a.Lend != nil && a.Across == nil) {
		err = bucket.InvalidConfig
	} else if a.Lend != nil && (len(a.Lend.Back) != len(a.Policies) || len(a.Lend.Want) != len(a.Policies)) {
		err = bucket.InvalidConfig
	}
	return storeErr(err)
}

// failureCause is what a failed store call under the decision's deadline
// reports (to the Observer, the log and metrics), as precisely as the
// store knows: the dial error when the store cannot connect, whatever the
// call returned (a decision that ran out of time waiting for a Redis that
// refuses connections reports the refusal); ErrTimeout, with the store's
// own error, when the call ran out of time; else the error.
func failureCause(err error, timedOut bool, dialErr, last error) error {
	if dialErr != nil && (timedOut || transport.IsTimeout(err)) {
		return fmt.Errorf("core: the store is unreachable: %w", dialErr)
	}
	if !timedOut && !transport.IsTimeout(err) {
		return err
	}
	if last != nil && !transport.IsTimeout(last) {
		return fmt.Errorf("%w; the store's last error: %w", ErrTimeout, last)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return fmt.Errorf("%w: %w", ErrTimeout, err)
}
