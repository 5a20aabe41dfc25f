package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// TestBreakerCountsCallsNotDecisions (issue 21): the decisions of one
// failed store call count as one failure, however many rode in it; calls
// of unknown identity count one each.
func TestBreakerCountsCallsNotDecisions(t *testing.T) {
	t.Parallel()
	tr := trip{failures: 3, cooldown: int64(time.Second)}
	b := &breaker{}
	for range 100 {
		if b.failedCall(false, 0, 42, tr) {
			t.Fatal("one failed call carrying 100 decisions opened the breaker")
		}
	}
	if b.failedCall(false, 0, 43, tr) {
		t.Fatal("two failed calls opened a breaker of threshold 3")
	}
	if !b.failedCall(false, 0, 44, tr) {
		t.Fatal("three failed calls did not open a breaker of threshold 3")
	}
	u := &breaker{}
	u.failedCall(false, 0, 0, tr)
	u.failedCall(false, 0, 0, tr)
	if !u.failedCall(false, 0, 0, tr) {
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

// switchable is a stand-in store deciding as the store it embeds while
// up, and failing every call while down.
type switchable struct {
	Store
	down *atomic.Bool
}

func (s switchable) Answer(context.Context, bucket.Ask) (Outcome, bool, error) {
	if s.down.Load() {
		return Outcome{}, false, errors.New("connection refused")
	}
	return Outcome{}, true, nil
}

// switchLimiter returns a FailOpen limiter named name on s, observed by o,
// logging to logger and reading clock, whose calls open the breaker at 2
// failures for a second.
func switchLimiter(t *testing.T, s switchable, name string, o Observer, logger *slog.Logger, clock func() int64) *Limiter {
	t.Helper()
	l, err := New(Config{Store: s, Name: name, Limit: PerSecond(10), FailMode: FailOpen, BreakerFailures: 2,
		BreakerCooldown: time.Second, Observer: o, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	l.clock = clock
	return l
}

// probeUp brings the store up again and moves the clock now reads past
// the breaker's cooldown: l's next decision is the probe, which closes it.
func probeUp(t *testing.T, down *atomic.Bool, now *int64, l *Limiter) {
	t.Helper()
	down.Store(false)
	*now += int64(time.Second)
	if r, _ := l.Allow(context.Background(), "k"); r.Degraded {
		t.Fatalf("%s's probe on a store up again: %+v", l.Name(), r)
	}
}

// changes records BreakerChange calls.
type changes struct {
	Observer
	got []string
}

func (c *changes) Decision(DecisionEvent) {}
func (c *changes) BreakerChange(policy string, open bool) {
	c.got = append(c.got, fmt.Sprint(policy, " ", open))
}

// TestBreakerClosingToItsOpener: a store's breaker, opened by one
// limiter's call, closed by another's probe, is told closed to the
// Observer told it open, under the same policy: a gauge per policy never
// stays open.
func TestBreakerClosingToItsOpener(t *testing.T) {
	t.Parallel()
	down := new(atomic.Bool)
	down.Store(true)
	s := switchable{Store: NewMemoryStore(), down: down}
	var oa, ob changes
	now := int64(1)
	clock := func() int64 { return now }
	quiet := slog.New(slog.DiscardHandler)
	a, b := switchLimiter(t, s, "a", &oa, quiet, clock), switchLimiter(t, s, "b", &ob, quiet, clock)
	ctx := context.Background()
	for range 3 {
		a.Allow(ctx, "k")
	}
	if r, _ := b.Allow(ctx, "k"); !r.Degraded {
		t.Fatalf("b with a's breaker open: %+v; want degraded", r)
	}
	probeUp(t, down, &now, b)
	if fmt.Sprint(oa.got, ob.got) != "[a true a false] []" {
		t.Fatalf("a's Observer heard %v, b's %v; want a's to hear the opening and the closing, b's nothing", oa.got, ob.got)
	}
}

// TestBreakerDoesNotPinItsOpener (issue 44): the store's breaker holds the
// limiter whose call opened it only weakly. Dropped while its breaker is
// open, that limiter is collected, and the closing is told by the limiter
// whose probe closed it, to its own Observer and log.
func TestBreakerDoesNotPinItsOpener(t *testing.T) {
	t.Parallel()
	down := new(atomic.Bool)
	down.Store(true)
	s := switchable{Store: NewMemoryStore(), down: down}
	var logs bytes.Buffer
	var oa, ob changes
	now := int64(1)
	clock := func() int64 { return now }
	b := switchLimiter(t, s, "b", &ob, slog.New(slog.NewTextHandler(&logs, nil)), clock)
	ctx := context.Background()
	gone := func() weak.Pointer[Limiter] { // a's only reference is in here
		a := switchLimiter(t, s, "a", &oa, slog.New(slog.DiscardHandler), clock)
		for range 2 {
			a.Allow(ctx, "k")
		}
		return weak.Make(a)
	}()
	if fmt.Sprint(oa.got) != "[a true]" {
		t.Fatalf("a's Observer heard %v; want the opening", oa.got)
	}
	for i := 0; gone.Value() != nil; i++ {
		if i == 10 {
			t.Fatal("a, dropped, is still alive after 10 collections: its open breaker holds it")
		}
		runtime.GC()
	}
	probeUp(t, down, &now, b)
	if fmt.Sprint(oa.got, ob.got) != "[a true] [b false]" {
		t.Fatalf("a's Observer heard %v, b's %v; want a's the opening only, b's the closing its probe made", oa.got, ob.got)
	}
	if !strings.Contains(logs.String(), "store answering again") {
		t.Fatalf("b's log: %q; want the closing", logs.String())
	}
}
