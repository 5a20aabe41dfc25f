package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

// TestDeadlineClock: each context is done at its own deadline, in any
// order of making, with DeadlineExceeded; Stop ends one early, with
// Canceled, and leaves the others running; the parent's values pass,
// its cancellation does not.
func TestDeadlineClock(t *testing.T) {
	var k deadlineClock
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	cancel()
	start := time.Now()
	waits := []time.Duration{60 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 30 * time.Millisecond}
	ctxs := make([]*deadlineCtx, len(waits))
	for i, w := range waits {
		ctxs[i] = k.Context(parent, start.Add(w))
	}
	stopped := ctxs[3]
	stopped.Stop()
	if err := stopped.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped: Err() = %v, want Canceled", err)
	}
	stopped.Stop() // twice: nothing
	for i, c := range ctxs {
		if c == stopped {
			continue
		}
		if got := c.Value(ctxKey{}); got != "v" {
			t.Errorf("ctx %d: Value = %v, want the parent's", i, got)
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(start.Add(waits[i])) {
			t.Errorf("ctx %d: Deadline() = %v, %v; want %v", i, d, ok, start.Add(waits[i]))
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("ctx %d (deadline in %v) not done after 5s", i, waits[i])
		}
		if at := time.Since(start); at < waits[i] {
			t.Errorf("ctx %d done after %v, before its deadline %v", i, at, waits[i])
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ctx %d: Err() = %v, want DeadlineExceeded", i, err)
		}
	}
	if n := len(k.ctxs); n != 0 {
		t.Errorf("%d contexts left in the clock", n)
	}
	// A past deadline is done at once; a later context sets the timer again.
	if c := k.Context(context.Background(), time.Now().Add(-time.Millisecond)); c.Err() == nil {
		t.Error("context with a past deadline not done")
	}
	c := k.Context(context.Background(), time.Now().Add(10*time.Millisecond))
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context made after the clock went idle not done after 5s")
	}
}

// TestDeadlineClockTimer: the timer is set for the earliest deadline,
// whatever order the contexts come in, and when the earliest one stops
// early the timer still wakes for the next.
func TestDeadlineClockTimer(t *testing.T) {
	var k deadlineClock
	start := time.Now()
	late := k.Context(context.Background(), start.Add(60*time.Millisecond))
	mid := k.Context(context.Background(), start.Add(40*time.Millisecond))
	first := k.Context(context.Background(), start.Add(20*time.Millisecond))
	k.mu.Lock()
	armed := k.armed
	k.mu.Unlock()
	if want := start.Add(20 * time.Millisecond); !armed.Equal(want) {
		t.Errorf("timer set for %v after start, want %v (the earliest deadline)", armed.Sub(start), want.Sub(start))
	}
	first.Stop()
	for _, c := range []*deadlineCtx{mid, late} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the earliest context stopped: a later one not done after 5s")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Err() = %v, want DeadlineExceeded", err)
		}
	}
}

// TestDeadlineClockContextPackage: what the context package builds on a
// deadlineCtx sees its deadline and its error, never its parent's
// cancellation: context.Cause, WithCancel on top, AfterFunc.
func TestDeadlineClockContextPackage(t *testing.T) {
	var k deadlineClock
	cause := errors.New("the caller left")
	parent, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	c := k.Context(parent, time.Now().Add(20*time.Millisecond))
	if err := context.Cause(c); err != nil {
		t.Errorf("running: Cause = %v, want nil", err)
	}
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("WithCancel on top: not done after 5s")
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc: not run after 5s")
	}
	for name, ctx := range map[string]context.Context{"ctx": c, "WithCancel on top": child} {
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Err() = %v, want DeadlineExceeded", name, err)
		}
		if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Cause = %v, want DeadlineExceeded", name, err)
		}
	}
	stopped := k.Context(parent, time.Now().Add(time.Hour))
	stopped.Stop()
	if err := context.Cause(stopped); !errors.Is(err, context.Canceled) {
		t.Errorf("stopped: Cause = %v, want Canceled", err)
	}
}

// TestDeadlineClockStopRacesFire: stops racing the timer (run with
// -race) each end their context once, with Canceled or DeadlineExceeded,
// and leave nothing in the clock.
func TestDeadlineClockStopRacesFire(t *testing.T) {
	var k deadlineClock
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := k.Context(context.Background(), time.Now().Add(time.Duration((g+i)%5)*100*time.Microsecond))
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
				c.Stop()
				<-c.Done()
				if err := c.Err(); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Err() = %v after stop", err)
					return
				}
			}
		})
	}
	wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := len(k.ctxs); n != 0 {
		t.Errorf("%d contexts left in the clock", n)
	}
}
