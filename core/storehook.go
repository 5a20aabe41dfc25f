package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/internal/storehook"
)

func init() {
	storehook.New = func(f any) any { return &hookStore{answer: f.(hookFunc)} }
}

// hookFunc answers a hookStore's call: op (opTake, opPeek, opRefund,
// opReset) for n tokens of subject under policies, filling each.
type hookFunc = func(ctx context.Context, op int, subject string, n int, policies []Policy, each []Outcome) (Outcome, error)

// errNoLeases is a hookStore's answer to a lease call.
var errNoLeases = errors.New("core: a test's stand-in store holds no leases")

// opReset is a hookStore's Reset call.
const opReset = 5

// hookStore is a test's stand-in for a store outside this process (see
// internal/storehook): it may block past its context's deadline and says
// nothing of why it fails. Its calls run on goroutines of their own,
// counted until they return.
type hookStore struct {
	answer   hookFunc
	inflight atomic.Int64
}

// call returns by a.deadline whatever answer does; answer's context has
// that deadline. The goroutine fills outcomes of its own, never a.each
// after call returned.
func (h *hookStore) call(ctx context.Context, a ask) (Outcome, error) {
	deadline, each := a.deadline, a.each
	type reply struct {
		o    Outcome
		err  error
		each []Outcome
	}
	if !admit(&h.inflight, a.bound) {
		return Outcome{}, ErrOverloaded
	}
	var cancel context.CancelFunc
	if deadline.IsZero() {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	done := make(chan reply, 1)
	go func() {
		defer h.inflight.Add(-1) // counted until answer returns, whenever that is
		var mine []Outcome
		if each != nil {
			mine = make([]Outcome, len(each))
		}
		o, err := h.answer(ctx, a.op, a.subj, a.n, a.policies, mine)
		done <- reply{o, err, mine}
	}()
	select {
	case r := <-done:
		copy(each, r.each)
		return r.o, r.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// Take implements Store: answer decides, with ctx's deadline.
func (h *hookStore) Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return h.call(ctx, ask{op: opTake, subj: hashSubject(subject), n: n, policies: policies, each: each, deadline: deadlineOf(ctx)})
}

func (h *hookStore) clear(ctx context.Context, subject string, policies []Policy) error {
	_, err := h.answer(ctx, opReset, subject, 0, policies, nil)
	return err
}

func (*hookStore) remote() bool                          { return true }
func (*hookStore) subject(key string) string             { return hashSubject(key) }
func (*hookStore) why() (dialErr, last error, told bool) { return nil, nil, false }
func (*hookStore) nodes() func(string) string            { return nil }
func (*hookStore) policyNames() *nameBook                { return nil }
func (*hookStore) memory() *MemoryStore                  { return nil }

func (*hookStore) acquire(context.Context, time.Time, int64, *leaseRequest) (leaseAnswer, error) {
	return leaseAnswer{}, errNoLeases
}

func (*hookStore) release(context.Context, time.Time, int64, string, string, string) error {
	return errNoLeases
}

func (*hookStore) renew(_ context.Context, _ time.Time, _ int64, _ string, _ time.Duration, ls []*Lease) ([]renewal, error) {
	return make([]renewal, len(ls)), errNoLeases
}
