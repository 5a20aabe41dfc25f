package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A go-redis client honours context deadlines on sockets only when its
// ContextTimeoutEnabled option is set, and it retries on its own; neither is
// ours to choose. So a store decision runs on a worker goroutine while the
// caller waits at most Config.Timeout. Workers are reused and leave after
// idling, and calls are pooled, so the hop allocates nothing.

// call is one store decision handed to a worker.
type call struct {
	ctx      context.Context
	store    Store
	subject  string
	n        int
	policies []Policy
	each     []Outcome

	out      Outcome
	err      error
	buf      []Outcome     // the worker's own per-policy outcomes, copied out on success
	inflight *atomic.Int64 // the limiter's count of store calls not yet returned

	done  chan struct{} // buffered 1: the worker finished and the caller waits
	state atomic.Int32  // callRunning, callAbandoned, callFinished
	timer *time.Timer
}

const (
	callRunning int32 = iota
	callAbandoned
	callFinished
)

var callPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{done: make(chan struct{}, 1), timer: t}
}}

func (c *call) run() {
	c.out, c.err = c.store.Take(c.ctx, c.subject, c.n, c.policies, c.each)
	c.inflight.Add(-1)
	if c.state.CompareAndSwap(callRunning, callFinished) {
		c.done <- struct{}{}
		return
	}
	c.recycle() // the caller gave up; the worker owns c now
}

func (c *call) recycle() {
	c.ctx, c.store, c.subject, c.policies, c.each, c.err, c.inflight = nil, nil, "", nil, nil, nil, nil
	c.state.Store(callRunning)
	callPool.Put(c)
}

// workers run calls. A send on jobs succeeds only when a worker is idle;
// otherwise a new worker starts. Idle workers leave after workerIdle.
var (
	jobs       = make(chan *call)
	workerIdle = 2 * time.Second
)

func worker(c *call) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		c.run()
		t.Reset(workerIdle)
		select {
		case c = <-jobs:
		case <-t.C:
			return
		}
	}
}

// takeBounded runs one store decision, waiting at most timeout.
// The caller must have counted the call in inflight; the worker uncounts it.
func takeBounded(ctx context.Context, timeout time.Duration, inflight *atomic.Int64, s Store, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	c := callPool.Get().(*call)
	c.ctx, c.store, c.subject, c.n, c.policies, c.inflight = ctx, s, subject, n, policies, inflight
	if each != nil {
		// The worker writes its own buffer: a caller that gave up must not
		// see its slice written behind its back.
		if cap(c.buf) < len(each) {
			c.buf = make([]Outcome, len(each))
		}
		c.each = c.buf[:len(each)]
	}
	select {
	case jobs <- c:
	default:
		go worker(c)
	}
	c.timer.Reset(timeout)
	select {
	case <-c.done:
	case <-c.timer.C:
		if c.state.CompareAndSwap(callRunning, callAbandoned) {
			return Outcome{}, ErrTimeout
		}
		<-c.done // finished just now: use the answer
	case <-ctx.Done():
		if c.state.CompareAndSwap(callRunning, callAbandoned) {
			c.timer.Stop()
			return Outcome{}, ctx.Err()
		}
		<-c.done
	}
	c.timer.Stop()
	out, err := c.out, c.err
	if each != nil && err == nil {
		copy(each, c.each)
	}
	c.recycle()
	return out, err
}
