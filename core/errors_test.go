package core

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// TestFailureCause: a fresh dial error explains a call that ran out of
// time; a timeout is ErrTimeout, with the store's last error when that
// says more; any other error is itself.
func TestFailureCause(t *testing.T) {
	refused := errors.New("dial tcp: connection refused")
	broken := errors.New("i/o: broken pipe")
	for _, tc := range []struct {
		name          string
		err           error
		timedOut      bool
		dialErr, last error
		is            []error
		not           []error
	}{
		{"refused", context.DeadlineExceeded, true, refused, nil, []error{refused}, []error{ErrTimeout}},
		{"timeout", context.DeadlineExceeded, true, nil, nil, []error{ErrTimeout}, nil},
		{"timeout, last", context.DeadlineExceeded, true, nil, broken, []error{ErrTimeout, broken}, nil},
		{"error", broken, false, refused, nil, []error{broken}, []error{ErrTimeout, refused}},
	} {
		got := failureCause(tc.err, tc.timedOut, tc.dialErr, tc.last)
		for _, e := range tc.is {
			if !errors.Is(got, e) {
				t.Errorf("%s: %v is not %v", tc.name, got, e)
			}
		}
		for _, e := range tc.not {
			if errors.Is(got, e) {
				t.Errorf("%s: %v is %v", tc.name, got, e)
			}
		}
	}
}

// TestStoreErrors (issue 44): core's errors are defined here; the stores'
// internals say which with a bucket.Fault, which core reports as its own
// error, with the words it had before the move: the fault alone as core's
// error itself, a fault with details as core's error followed by them,
// matching both it and whatever else the internals wrapped.
func TestStoreErrors(t *testing.T) {
	for f, want := range faults {
		if f == 0 {
			continue
		}
		if got := storeErr(bucket.Fault(f)); got != want {
			t.Errorf("storeErr(%v) = %v, want %v", bucket.Fault(f), got, want)
		}
		if "core: "+bucket.Fault(f).Error() != want.Error() {
			t.Errorf("fault %d reads %q, core's error %q", f, bucket.Fault(f), want)
		}
	}
	inner := errors.New("i/o")
	got := storeErr(fmt.Errorf("%w: %q for %d decisions: %w", bucket.BadReply, "x", 2, inner))
	if !errors.Is(got, ErrBadReply) || !errors.Is(got, inner) || errors.Is(got, ErrOverloaded) {
		t.Errorf("%v: want ErrBadReply and the inner error", got)
	}
	if want := `core: unexpected reply from store: "x" for 2 decisions: i/o`; got.Error() != want {
		t.Errorf("%q, want %q", got, want)
	}
	if storeErr(nil) != nil || storeErr(inner) != inner {
		t.Error("storeErr changed an error with no fault")
	}
	p := PerSecond(10).policy("p")
	for _, tc := range []struct {
		a    bucket.Ask
		want error
	}{
		{bucket.Ask{Op: bucket.OpTake, Subj: "", N: 1, Policies: []bucket.Policy{p}}, ErrEmptyKey},
		{bucket.Ask{Op: bucket.OpTake, Subj: "k", N: 0, Policies: []bucket.Policy{p}}, ErrInvalidCost},
		{bucket.Ask{Op: bucket.OpTake, Subj: "k", N: 11, Policies: []bucket.Policy{p}}, ErrCostTooHigh},
		{bucket.Ask{Op: bucket.OpTake, Subj: "k", N: 1}, ErrInvalidConfig},
		{bucket.Ask{Op: bucket.OpLend, Subj: "k", N: 1, Policies: []bucket.Policy{p}}, ErrInvalidConfig},
		{bucket.Ask{Op: bucket.OpTake, Subj: "k", N: 1, Policies: []bucket.Policy{p}}, nil},
	} {
		if got := checkAsk(&tc.a); got != tc.want {
			t.Errorf("checkAsk(%+v) = %v, want %v", tc.a, got, tc.want)
		}
	}
}
