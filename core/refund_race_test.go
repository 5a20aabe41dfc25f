package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// heldStore is a one-token bucket whose takes can be held after the store
// decided, before the answer returns: a call in flight.
type heldStore struct {
	mu      sync.Mutex
	tokens  int
	hold    chan struct{} // when set, the next take waits on it after deciding
	decided chan struct{}
	calls   atomic.Int64
}

func (s *heldStore) store() core.Store {
	return fakestore.New(func(ctx context.Context, c bucket.Ask) (core.Outcome, error) {
		if c.Op == bucket.OpRefund {
			return s.Refund(ctx, c.Subj, c.N, c.Policies, c.Each)
		}
		return s.Take(ctx, c.Subj, c.N, c.Policies, c.Each)
	})
}

func (s *heldStore) Take(_ context.Context, _ string, n int, _ []core.Policy, _ []core.Outcome) (core.Outcome, error) {
	s.calls.Add(1)
	s.mu.Lock()
	o := core.Outcome{RetryAfter: 30 * time.Second, ResetAfter: 30 * time.Second}
	if s.tokens >= n {
		s.tokens -= n
		o = core.Outcome{Allowed: true, Remaining: int64(s.tokens), ResetAfter: 30 * time.Second}
	}
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(s.decided)
		<-hold
	}
	return o, nil
}

func (s *heldStore) Refund(_ context.Context, _ string, n int, _ []core.Policy, _ []core.Outcome) (core.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = min(1, s.tokens+n)
	return core.Outcome{Allowed: true, Remaining: int64(s.tokens)}, nil
}

// TestRefundRacingProbeLeavesNoStaleDenial (issue 23, item 3): a refund
// that lands while the denial cache's probe is in flight, its answer
// (denied) decided before the refund, must not leave that denial cached:
// the next request reaches the store and gets the refunded token.
func TestRefundRacingProbeLeavesNoStaleDenial(t *testing.T) {
	t.Parallel()
	s := &heldStore{tokens: 1}
	l := limitertest.New(t, core.Config{Store: s.store(), Limit: core.PerMinute(2), FailMode: core.FailClosed, Timeout: 5 * time.Second})
	var now atomic.Int64
	core.SetClock(l, func() time.Duration { return time.Duration(now.Load()) })
	ctx := context.Background()
	if r, _ := l.Allow(ctx, "k"); !r.Allowed {
		t.Fatalf("first request: %+v", r)
	}
	for i := range 2 {
		if r, _ := l.Allow(ctx, "k"); r.Allowed || r.Degraded {
			t.Fatalf("request %d on an empty bucket: %+v", i+2, r)
		}
	}
	if got := s.calls.Load(); got != 2 {
		t.Fatalf("%d store calls; want 2 (the second denial cached)", got)
	}
	now.Store(int64(31 * time.Second)) // the cached denial has passed: the next caller probes
	s.mu.Lock()
	s.hold, s.decided = make(chan struct{}), make(chan struct{})
	hold, decided := s.hold, s.decided
	s.mu.Unlock()
	probe := make(chan core.Result)
	go func() {
		r, _ := l.Allow(ctx, "k")
		probe <- r
	}()
	<-decided // the probe's store call decided "denied"; its answer is on its way
	now.Add(int64(time.Millisecond))
	if r, err := l.Refund(ctx, "k", 1); err != nil || r.Degraded {
		t.Fatalf("refund: %+v %v", r, err)
	}
	now.Add(int64(time.Millisecond))
	close(hold)
	if r := <-probe; r.Allowed {
		t.Fatalf("probe decided before the refund: %+v; want denied", r)
	}
	before := s.calls.Load()
	r, _ := l.Allow(ctx, "k")
	if !r.Allowed || s.calls.Load() != before+1 {
		t.Fatalf("after the refund: %+v, %d store calls; want the refunded token, from the store", r, s.calls.Load()-before)
	}
}
