package transport

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// deadlineClock makes the contexts store calls run under: each closes its Done
// channel once its deadline passes, as context.WithDeadline's do, but one
// timer serves them all, set for the earliest deadline and set again only
// when that one passes or an earlier one comes. A timer of its own per call, added to the runtime's timers
// as the earliest one, wakes an idle thread on every call (see
// BENCHMARKS.md, "Tricks kept").
type deadlineClock struct {
	mu    sync.Mutex
	ctxs  deadlineHeap // not yet done, earliest deadline first
	timer *time.Timer  // nil until the first context
	armed time.Time    // when timer fires; zero: it is not set
}

// deadlineCtx is a context from a deadlineClock: its parent's values, none of its
// parent's cancellation, and its own deadline.
type deadlineCtx struct {
	context.Context // values only
	deadline        time.Time
	done            chan struct{}
	err             error // set, under the clock's mu, before done closes
	clock           *deadlineClock
	i               int // index in clock.ctxs; -1 once done
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }

func (c *deadlineCtx) Err() error {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	return c.err
}

// Context returns a context with parent's values and deadline d, done at
// d or when Stop is called, whichever comes first. parent's cancellation
// is ignored, its cause included (context.Cause reads it through Value,
// which WithoutCancel hides): the store's callers never cancel their calls.
func (k *deadlineClock) Context(parent context.Context, d time.Time) *deadlineCtx {
	if parent.Done() != nil {
		parent = context.WithoutCancel(parent)
	}
	c := &deadlineCtx{Context: parent, deadline: d, done: make(chan struct{}), clock: k, i: -1}
	wait := time.Until(d)
	k.mu.Lock()
	defer k.mu.Unlock()
	if wait <= 0 {
		c.err = context.DeadlineExceeded
		close(c.done)
		return c
	}
	heap.Push(&k.ctxs, c)
	if k.armed.IsZero() || d.Before(k.armed) {
		k.armed = d
		if k.timer == nil {
			k.timer = time.AfterFunc(wait, k.fire)
		} else {
			k.timer.Reset(wait)
		}
	}
	return c
}

// Stop ends c (context.Canceled) unless its deadline already did.
func (c *deadlineCtx) Stop() {
	k := c.clock
	k.mu.Lock()
	defer k.mu.Unlock()
	if c.i < 0 {
		return
	}
	heap.Remove(&k.ctxs, c.i)
	c.err = context.Canceled
	close(c.done)
}

// fire ends the contexts whose deadline passed and sets the timer for
// the next one.
func (k *deadlineClock) fire() {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.ctxs) > 0 && !k.ctxs[0].deadline.After(now) {
		c := heap.Pop(&k.ctxs).(*deadlineCtx)
		c.err = context.DeadlineExceeded
		close(c.done)
	}
	k.armed = time.Time{}
	if len(k.ctxs) > 0 {
		k.armed = k.ctxs[0].deadline
		k.timer.Reset(time.Until(k.armed))
	}
}

// deadlineHeap orders contexts by deadline (container/heap).
type deadlineHeap []*deadlineCtx

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *deadlineHeap) Push(x any) {
	c := x.(*deadlineCtx)
	c.i = len(*h)
	*h = append(*h, c)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.i = -1
	return c
}
