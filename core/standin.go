package core

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/standin"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// storeDo asks s to do a (OpClear included), checked as the guard does
// not, by ctx's deadline, with a.Subj keyed as the store keys a
// limiter's key.
func storeDo(ctx context.Context, s storeCalls, a bucket.Ask) (bucket.Outcome, error) {
	if a.Subj != "" {
		a.Subj = s.subject(a.Subj)
	}
	if a.Across != nil {
		a.Across = slices.Clone(a.Across)
		for i := range a.Across {
			a.Across[i].Subj = s.subject(a.Across[i].Subj)
		}
		if len(a.Across) > 0 {
			a.Subj = a.Across[0].Subj
		}
	}
	if err := checkAsk(&a); err != nil {
		return bucket.Outcome{}, err
	}
	a.Deadline, _ = ctx.Deadline()
	return s.call(ctx, a)
}

// errNoLeases is a hookStore's answer to a lease call.
var errNoLeases = errors.New("core: a test's stand-in store holds no leases or live sets")

// hookStore is a test's stand-in for a store outside this process (see
// internal/standin): it may block past its context's deadline and says
// nothing of why it fails. Its calls run on goroutines of their own,
// counted until they return.
type hookStore struct {
	s        standin.Store
	inner    storeCalls // the core.Store s embeds: it decides what s passes
	inflight atomic.Int64
	nodes    nodeBreakers // one node
}

// answer is the stand-in's answer to a, or inner's when it passes a on.
func (h *hookStore) answer(ctx context.Context, a bucket.Ask) (bucket.Outcome, error) {
	o, pass, err := h.s.Answer(ctx, a)
	if pass && err == nil {
		return storeDo(ctx, h.inner, a)
	}
	return o, err
}

// call returns by a.Deadline whatever answer does; answer's context has
// that deadline. The goroutine fills outcomes of its own, never a.Each
// after call returned.
func (h *hookStore) call(ctx context.Context, a bucket.Ask) (bucket.Outcome, error) {
	deadline, each := a.Deadline, a.Each
	type reply struct {
		o    bucket.Outcome
		err  error
		each []bucket.Outcome
	}
	if !transport.Admit(&h.inflight, a.Bound) {
		return bucket.Outcome{}, ErrOverloaded
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
		mine := a                // the goroutine's own outcomes
		if each != nil {
			mine.Each = make([]bucket.Outcome, len(each))
		}
		o, err := h.answer(ctx, mine)
		done <- reply{o, err, mine.Each}
	}()
	select {
	case r := <-done:
		copy(each, r.each)
		return r.o, r.err
	case <-ctx.Done():
		return bucket.Outcome{}, ctx.Err()
	}
}

func (*hookStore) remote() bool                          { return true }
func (*hookStore) subject(key string) string             { return bucket.HashSubject(key) }
func (*hookStore) why() (dialErr, last error, told bool) { return nil, nil, false }
func (h *hookStore) breakers() *nodeBreakers             { return &h.nodes }
func (*hookStore) unit(string) string                    { return "" }
func (*hookStore) policyNames() *nameBook                { return nil }
func (*hookStore) take1(string, int, *bucket.Policy) (bucket.Decision, bool) {
	return bucket.Decision{}, false
}

func (*hookStore) lease(context.Context, leaseCall) (bucket.LeaseAnswer, error) {
	return bucket.LeaseAnswer{}, errNoLeases
}
