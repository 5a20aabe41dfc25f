package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A go-redis client created with ContextTimeoutEnabled bounds everything it
// does — dialing, waiting for a pooled connection, reading, backing off
// between retries — by the context's deadline. With such a client the
// limiter calls the store on the caller's goroutine under a deadline
// context, instead of handing the call to a worker: the same bound, without
// two goroutine wake-ups per decision (which cost as much as the round
// trip on a busy machine).

// deadlineHonoring is a Store that promises to return by its context's
// deadline (plus scheduling noise): the Limiter then calls it inline.
type deadlineHonoring interface {
	honorsDeadline() bool
}

// honorsDeadline reports whether the store's client bounds its work by
// context deadlines (go-redis's ContextTimeoutEnabled).
func (s *RedisStore) honorsDeadline() bool {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// boundedCtx is a reusable context with a deadline: context.WithTimeout
// allocates three objects per call, this none once pooled. Done closes when
// the deadline passes; values come from the parent. Cancelling the parent
// does not end it early (the deadline still bounds the call).
type boundedCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}
	fired    atomic.Bool
	timer    *time.Timer
}

var boundedPool = sync.Pool{New: func() any {
	b := &boundedCtx{done: make(chan struct{})}
	b.timer = time.AfterFunc(time.Hour, b.fire)
	b.timer.Stop()
	return b
}}

func (b *boundedCtx) fire() {
	b.fired.Store(true)
	close(b.done)
}

// withBound returns a context ending at now + d (or the parent's earlier
// deadline); release must be called once the call has returned.
func withBound(parent context.Context, d time.Duration) *boundedCtx {
	b := boundedPool.Get().(*boundedCtx)
	b.parent = parent
	b.deadline = time.Now().Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(b.deadline) {
		b.deadline = pd
		d = time.Until(pd)
	}
	b.timer.Reset(d)
	return b
}

// release returns b to the pool unless its timer fired (its channel is
// closed then, and the timer's function may still be running).
func (b *boundedCtx) release() {
	if b.timer.Stop() && !b.fired.Load() {
		b.parent = nil
		boundedPool.Put(b)
	}
}

func (b *boundedCtx) Deadline() (time.Time, bool) { return b.deadline, true }
func (b *boundedCtx) Done() <-chan struct{}       { return b.done }
func (b *boundedCtx) Value(key any) any           { return b.parent.Value(key) }

func (b *boundedCtx) Err() error {
	if b.fired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// takeInline runs one store decision on the caller's goroutine, bounded by
// a deadline the store honours.
func takeInline(ctx context.Context, timeout time.Duration, s Store, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	b := withBound(ctx, timeout)
	o, err := s.Take(b, subject, n, policies, each)
	if err != nil && b.fired.Load() {
		err = ErrTimeout
	}
	b.release()
	return o, err
}
