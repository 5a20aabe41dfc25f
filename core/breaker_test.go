package core

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// TestBreakerCountsCallsNotDecisions (issue 21): the decisions of one
// failed store call count as one failure, however many rode in it; calls
// of unknown identity count one each.
func TestBreakerCountsCallsNotDecisions(t *testing.T) {
	t.Parallel()
	b := &breaker{threshold: 3, cooldown: int64(time.Second)}
	for range 100 {
		if b.failedCall(false, 0, 42) {
			t.Fatal("one failed call carrying 100 decisions opened the breaker")
		}
	}
	if b.failedCall(false, 0, 43) {
		t.Fatal("two failed calls opened a breaker of threshold 3")
	}
	if !b.failedCall(false, 0, 44) {
		t.Fatal("three failed calls did not open a breaker of threshold 3")
	}
	u := &breaker{threshold: 3, cooldown: int64(time.Second)}
	u.failure(false, 0)
	u.failure(false, 0)
	if !u.failure(false, 0) {
		t.Fatal("three failures of unknown calls did not open the breaker")
	}
}

// failedBatchStore fails every decision as one call would: the same
// *transport.CallError for all of them.
func failedBatchStore(err error) Store { return failing{err: err} }

// failing is a stand-in store (internal/standin) failing every call with err.
type failing struct {
	Store // nil: a stand-in
	err   error
}

func (f failing) Answer(context.Context, bucket.Ask) (Outcome, bool, error) {
	return Outcome{}, false, f.err
}

// TestFailedBatchOpensNoBreaker (issue 21): a hundred decisions riding in
// one failed call are one failure, so they do not open the breaker for
// the other keys.
func TestFailedBatchOpensNoBreaker(t *testing.T) {
	t.Parallel()
	s := failedBatchStore(&transport.CallError{Call: 7, Err: errors.New("i/o error")})
	l, err := New(Config{Store: s, Limit: PerSecond(10), FailMode: FailOpen, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var now int64
	l.clock = func() int64 { return now }
	for i := range 100 {
		now += int64(time.Millisecond)
		r, _ := l.Allow(context.Background(), "hot")
		if !r.Degraded {
			t.Fatalf("decision %d: %+v", i, r)
		}
	}
	if until := l.breakers.one.openUntil.Load(); until != 0 {
		t.Fatal("one failed call's decisions opened the breaker")
	}
}
