package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// LeaseKey lays out the key of the leases of a subject already passed
// through bucket.HashSubject: <prefix>{<subject>}:<name>{leases}. The subject's
// hash tag comes first, so a subject's leases live in the slot of its
// buckets; no policy name holds braces, so no bucket has this key.
func (s *Store) LeaseKey(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name + "{leases}"
}

// LeaseID names one lease: its subject (as the store keys it) and id.
type LeaseID struct{ Subj, ID string }

// LeaseQueues are a Concurrency's acquires waiting, per set, for the
// set's acquire call in flight (see Store.Acquire). Every request
// of a Concurrency has the same name, max, lease and policies, so one
// call can carry any of them.
type LeaseQueues struct {
	mu    sync.Mutex
	m     map[string][]*leaseWaiter // by subject: a call is in flight; these wait for the next
	calls atomic.Uint64             // ids of failed calls, for the breaker (see CallError)
}

// join queues w for the next call of its set and reports true when its
// set has a call in flight; else it marks one in flight, for w's caller
// to make, and reports false. With no queues, nothing is batched.
func (qs *LeaseQueues) join(w *leaseWaiter) bool {
	if qs == nil {
		return false
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	next, busy := qs.m[w.req.Subj]
	switch {
	case busy:
		qs.m[w.req.Subj] = append(next, w)
	case qs.m == nil:
		qs.m = map[string][]*leaseWaiter{w.req.Subj: nil}
	default:
		qs.m[w.req.Subj] = nil
	}
	return busy
}

// next takes the acquires waiting for subj's next call, those whose
// callers still wait, at most maxLeaseBatch, and reports them (the call
// is then in flight); when none, subj has no call in flight any more.
func (qs *LeaseQueues) next(subj string) []*leaseWaiter {
	if qs == nil {
		return nil
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	waiting := qs.m[subj]
	var ws []*leaseWaiter
	n := 0
	for ; n < len(waiting) && len(ws) < maxLeaseBatch; n++ {
		if waiting[n].state.Load() == waiterWaiting {
			ws = append(ws, waiting[n])
		}
	}
	clear(waiting[:n]) // the callers taken, or gone, are not kept
	if len(ws) == 0 {
		delete(qs.m, subj)
		return nil
	}
	qs.m[subj] = waiting[n:]
	return ws
}

// maxLeaseBatch bounds the acquires of one call: the script stays short
// on the Redis server (a few µs each), and the rest leave in the next.
const maxLeaseBatch = 256

// leaseWaiter is one acquire waiting for its answer in a call of its set.
type leaseWaiter struct {
	ctx      context.Context // values only
	req      *bucket.LeaseAsk
	deadline time.Time // the caller's
	bound    int64     // MaxInFlight of the caller's guard

	state atomic.Int32       // waiterWaiting, then waiterLeft or waiterAnswered
	a     bucket.LeaseAnswer // set before done is sent
	err   error              // likewise
	done  chan struct{}      // one value once answered; buffered
}

// A leaseWaiter's states.
const (
	waiterWaiting = iota
	waiterLeft
	waiterAnswered
)

// wait waits for w's answer until w's deadline (then
// context.DeadlineExceeded: w's caller degrades alone, and an acquire
// the call grants it later is taken back).
func (w *leaseWaiter) wait() (bucket.LeaseAnswer, error) {
	select {
	case <-w.done: // answered on this goroutine
		return w.a, w.err
	default:
	}
	t := time.NewTimer(time.Until(w.deadline))
	defer t.Stop()
	select {
	case <-w.done:
		return w.a, w.err
	case <-t.C:
	}
	if !w.state.CompareAndSwap(waiterWaiting, waiterLeft) {
		<-w.done // answered as the deadline came: the answer stands
		return w.a, w.err
	}
	return bucket.LeaseAnswer{}, context.DeadlineExceeded
}

// Acquire takes a slot for req by deadline, as decisions are bounded (see
// Store.Do). The acquires of one set batch themselves through
// qs (a Concurrency's; nil: none): one that finds no call of its set in
// flight starts one at once, alone; those arriving while it is in flight
// leave together in the next call when it ends, and so on, each caller
// waiting until its own deadline. So a set has at most one acquire call
// in flight per Concurrency, and a flood on one key holds one of the
// store's MaxInFlight calls, not one per acquire. A call is one
// AcquireLease script call, or AcquireWithRate for requests with
// policies (two round trips the first time, when Redis answers
// NOSCRIPT), deciding its acquires in order, each as if alone.
//
// Each call is counted among the calls running in the store, against
// bound (bucket.Overloaded beyond it). A lone call goes on its caller's
// goroutine, under its deadline, while calls to its node are fast and the
// client honours deadlines (see Store.fast); else calls go on a goroutine of
// their own (see acquireCalls).
func (s *Store) Acquire(ctx context.Context, deadline time.Time, bound int64, qs *LeaseQueues, req *bucket.LeaseAsk) (bucket.LeaseAnswer, error) {
	w := &leaseWaiter{ctx: ctx, req: req, deadline: deadline, bound: bound, done: make(chan struct{}, 1)}
	if qs.join(w) {
		return w.wait()
	}
	ws := []*leaseWaiter{w}
	switch last := s.lastToSubj(req.Subj); {
	case !s.enter(bound):
		ws = s.answer(qs, ws, nil, bucket.Overloaded)
	case s.fast(last, deadline):
		ctx := s.clock.Context(ctx, deadline)
		as, err := s.acquireMany(ctx, last, ws, deadline)
		ctx.Stop()
		s.leave()
		ws = s.answer(qs, ws, as, err)
	default:
		go s.acquireCalls(qs, ws, true)
		return w.wait()
	}
	if ws != nil {
		go s.acquireCalls(qs, ws, false)
	}
	return w.wait()
}

// acquireCalls makes the acquire call of ws (of one set, in order;
// counted among the calls running already when admitted), then the set's
// next calls while acquires wait for them, on this goroutine. Each runs
// under the latest deadline of its acquires but at least
// minSend (a call cut at Timeout would cost its connection).
func (s *Store) acquireCalls(qs *LeaseQueues, ws []*leaseWaiter, admitted bool) {
	for ws != nil {
		if !admitted && !s.enter(ws[0].bound) {
			ws = s.answer(qs, ws, nil, bucket.Overloaded)
			continue
		}
		admitted = false
		latest := time.Now().Add(minSend)
		for _, w := range ws {
			if w.deadline.After(latest) {
				latest = w.deadline
			}
		}
		ctx := s.clock.Context(ws[0].ctx, latest)
		as, err := s.acquireMany(ctx, s.lastToSubj(ws[0].req.Subj), ws, time.Time{})
		ctx.Stop()
		s.leave()
		ws = s.answer(qs, ws, as, err)
	}
}

// answer gives each acquire of ws its answer of the call, as[i], or the
// call's error, and returns the acquires waiting for the set's next call
// (nil when none: the set has no call in flight any more). It settles, in
// this one place, what becomes of an acquire whose caller was not told
// it was granted: one whose call failed (its reply may be lost after the
// script added the lease) or that was answered after its caller stopped
// waiting is taken back, best effort within its request's timeout,
// rather than hold a phantom slot for a Lease. Its tokens, if any, stay
// spent. A call never made (bucket.Overloaded) has nothing to take back.
func (s *Store) answer(qs *LeaseQueues, ws []*leaseWaiter, as []bucket.LeaseAnswer, err error) []*leaseWaiter {
	if err != nil && len(ws) > 1 && qs != nil {
		err = &CallError{Call: qs.calls.Add(1), Err: err} // the breaker counts one failed call
	}
	var back []any
	for i, w := range ws {
		told := w.state.CompareAndSwap(waiterWaiting, waiterAnswered)
		switch {
		case err == nil && told:
			w.a = as[i]
		case err == nil:
			if as[i].Allowed {
				back = append(back, w.req.ID)
			}
		case told:
			w.err = err
			fallthrough
		default:
			if !errors.Is(err, bucket.Overloaded) {
				back = append(back, w.req.ID)
			}
		}
		if told {
			w.done <- struct{}{}
		}
	}
	if len(back) > 0 {
		req := ws[0].req
		go func() {
			_ = s.Release(ws[0].ctx, time.Now().Add(req.Timeout), 0, req.Name, req.Subj, back...)
		}()
	}
	return qs.next(ws[0].req.Subj)
}

// acquireMany runs the acquire call of ws under ctx (see Store.run
// for cut) and returns their answers, in order.
func (s *Store) acquireMany(ctx context.Context, last *lastCall, ws []*leaseWaiter, cut time.Time) ([]bucket.LeaseAnswer, error) {
	as := make([]bucket.LeaseAnswer, len(ws))
	err := s.run(ctx, last, func(ctx context.Context) error {
		if ws[0].req.Policies != nil {
			return s.acquireWithRate(ctx, ws, as)
		}
		return s.acquireLeases(ctx, ws, as)
	}, cut)
	return as, err
}

// acquireLeases runs the AcquireLease script for ws, filling as.
func (s *Store) acquireLeases(ctx context.Context, ws []*leaseWaiter, as []bucket.LeaseAnswer) error {
	req := ws[0].req
	args := make([]any, 0, 2+len(ws))
	args = append(args, req.Max, req.Lease.Microseconds())
	for _, w := range ws {
		args = append(args, w.req.ID)
	}
	v, err := AcquireLease.Run(ctx, s.client, []string{s.LeaseKey(req.Subj, req.Name)}, args...).Slice()
	if err != nil {
		return err
	}
	if len(v) != 5*len(ws) {
		return fmt.Errorf("%w: %d values for %d acquires", bucket.BadReply, len(v), len(ws))
	}
	for i := range as {
		if as[i], err = s.leaseReply(v[5*i:5*i+5], 5); err != nil {
			return err
		}
	}
	return nil
}

// leaseCall makes the lease call f for subj by deadline, bounded as the
// store's decisions are (see Store.Do): counted among the decisions
// running in the store, against bound (bucket.Overloaded beyond it); on the
// caller's goroutine under deadline while calls to subj's node are fast
// and the client honours deadlines, else on a goroutine of its own under
// at least minSend (a call cut at Timeout would cost its connection),
// which the caller waits for until deadline (then context.DeadlineExceeded).
func (s *Store) leaseCall(ctx context.Context, deadline time.Time, bound int64, subj string, f func(context.Context) error) error {
	if !s.enter(bound) {
		return bucket.Overloaded
	}
	last := s.lastToSubj(subj)
	if s.fast(last, deadline) {
		ctx := s.clock.Context(ctx, deadline)
		err := s.run(ctx, last, f, deadline)
		ctx.Stop()
		s.leave()
		return err
	}
	send := time.Now().Add(minSend)
	if deadline.After(send) {
		send = deadline
	}
	callCtx := s.clock.Context(ctx, send)
	answer := make(chan error, 1)
	go func() {
		err := s.run(callCtx, last, f, time.Time{})
		callCtx.Stop()
		s.leave()
		answer <- err
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-answer:
		return err
	case <-t.C:
	}
	select {
	case err := <-answer:
		return err // answered as the deadline came: the answer stands
	default:
	}
	return context.DeadlineExceeded
}

// leaseReply reads the lease part of an acquire's reply v, whose length
// must be want.
func (s *Store) leaseReply(v []any, want int) (bucket.LeaseAnswer, error) {
	if len(v) != want {
		return bucket.LeaseAnswer{}, fmt.Errorf("%w: %d values", bucket.BadReply, len(v))
	}
	var n [5]int64
	for i := range n {
		x, ok := v[i].(int64)
		if !ok {
			return bucket.LeaseAnswer{}, fmt.Errorf("%w: %T", bucket.BadReply, v[i])
		}
		n[i] = x
	}
	s.ready.Store(true)
	return bucket.LeaseAnswer{
		Allowed:    n[0] == 1,
		Held:       int(n[1]),
		RetryAfter: time.Duration(max(n[2], 0)) * time.Microsecond,
		ResetAfter: time.Duration(max(n[3], 0)) * time.Microsecond,
		Pruned:     int(n[4]),
	}, nil
}

// acquireWithRate runs the AcquireWithRate script for ws: for each in
// turn, a slot of their subject and one token under their policies (the
// buckets of the subject, as TokenBuckets keys them), all or nothing, in
// one round trip. It fills as, and each request's each with every
// policy's outcome and its rate with the binding one.
func (s *Store) acquireWithRate(ctx context.Context, ws []*leaseWaiter, as []bucket.LeaseAnswer) error {
	req := ws[0].req
	policies, subj := req.Policies, req.Subj
	keys := make([]string, 0, 1+len(policies)+len(ws))
	keys = append(keys, s.LeaseKey(subj, req.Name))
	args := make([]any, 0, 3+len(ws)+8+2*len(policies))
	args = append(args, req.Max, req.Lease.Microseconds(), len(ws))
	for _, w := range ws {
		args = append(args, w.req.ID)
	}
	args = append(args, recordTTL(ctx), 1, len(policies), 0)
	for i := range policies {
		keys = append(keys, s.Key(subj, policies[i].Name))
		args = append(args, policies[i].Arg())
	}
	for range ws {
		keys = append(keys, s.recordKey(subj, s.idSeq.Add(1)))
	}
	args = append(args, bucket.OpTake, 1, len(policies))
	for i := range policies {
		args = append(args, i+1)
	}
	args = append(args, 1) // one request of that shape
	v, err := AcquireWithRate.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return err
	}
	if len(v) != 6*len(ws) {
		return fmt.Errorf("%w: %d values for %d acquires", bucket.BadReply, len(v), len(ws))
	}
	for i, w := range ws {
		if as[i], err = s.leaseReply(v[6*i:6*i+6], 6); err != nil {
			return err
		}
		reply, ok := v[6*i+5].(string)
		if !ok {
			return fmt.Errorf("%w: tokens' reply %T", bucket.BadReply, v[6*i+5])
		}
		if w.req.Rate, err = ParseReply(reply, w.req.Each); err != nil {
			return err
		}
	}
	return nil
}

// Release removes the leases ids of one set, those there, by deadline:
// one ZREM, which never touches another lease, and deletes the set with
// its last member.
func (s *Store) Release(ctx context.Context, deadline time.Time, bound int64, name, subj string, ids ...any) error {
	return s.leaseCall(ctx, deadline, bound, subj, func(ctx context.Context) error {
		return s.client.ZRem(ctx, s.LeaseKey(subj, name), ids...).Err()
	})
}

// Renew renews ls (at most core's chunk of 500 leases) by
// deadline, in one bounded call (see renewLeases).
func (s *Store) Renew(ctx context.Context, deadline time.Time, bound int64, name string, lease time.Duration, ls []LeaseID) ([]bucket.Renewal, error) {
	var got []bucket.Renewal
	err := s.leaseCall(ctx, deadline, bound, ls[0].Subj, func(ctx context.Context) (err error) {
		got, err = s.renewLeases(ctx, name, lease, ls)
		return err
	})
	if err != nil {
		// Unknown (bucket.RenewUnknown), tried again next round; got may still
		// be written by a call running late.
		return make([]bucket.Renewal, len(ls)), err
	}
	return got, nil
}

// renewLeases renews leases (all of one Concurrency, so of one name and
// lease) and reports, per lease, renewed, expired or gone (never brought
// back), or unknown (its call failed). A standalone or Sentinel Redis gets
// one script call for a chunk of leases; a Cluster or Ring one
// pipeline, with a call per subject (a script's keys must share a slot),
// which go-redis sends as one batch per node.
func (s *Store) renewLeases(ctx context.Context, name string, lease time.Duration, ls []LeaseID) ([]bucket.Renewal, error) {
	out := make([]bucket.Renewal, len(ls))
	groups := s.renewGroups(name, lease, ls)
	cmds := make([]*redis.Cmd, len(groups))
	if len(groups) == 1 {
		cmds[0] = RenewLeases.Run(ctx, s.client, groups[0].keys, groups[0].args...)
	} else {
		pipe := s.client.Pipeline()
		for i, g := range groups {
			cmds[i] = RenewLeases.EvalSha(ctx, pipe, g.keys, g.args...)
		}
		_, _ = pipe.Exec(ctx)
		for i, g := range groups {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				// Loads the script where it is missing, once per node.
				cmds[i] = RenewLeases.Run(ctx, s.client, g.keys, g.args...)
			}
		}
	}
	var firstErr error
	for i, g := range groups {
		v, err := cmds[i].Slice()
		if err == nil && len(v) != len(g.at) {
			err = fmt.Errorf("%w: %d values", bucket.BadReply, len(v))
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			for _, at := range g.at {
				out[at] = bucket.RenewUnknown
			}
			continue
		}
		for j, at := range g.at {
			switch n, _ := v[j].(int64); n {
			case 1:
				out[at] = bucket.Renewed
			case 2:
				out[at] = bucket.RenewExpired
			default:
				out[at] = bucket.RenewGone
			}
		}
	}
	return out, firstErr
}

// renewGroup is one renewLeases call: its keys and arguments, and the
// indexes of its leases in the caller's list.
type renewGroup struct {
	keys []string
	args []any
	at   []int
}

// renewGroups splits ls into renewLeases calls: one per subject on a
// Cluster or Ring, else one.
func (s *Store) renewGroups(name string, lease time.Duration, ls []LeaseID) []*renewGroup {
	var groups []*renewGroup
	bySubj := make(map[string]*renewGroup)
	for i, l := range ls {
		var g *renewGroup
		switch {
		case s.split:
			g = bySubj[l.Subj]
		case i > 0:
			g = groups[0]
		}
		if g == nil {
			g = &renewGroup{args: []any{lease.Microseconds()}}
			groups = append(groups, g)
			if s.split {
				bySubj[l.Subj] = g
			}
		}
		g.keys, g.args, g.at = append(g.keys, s.LeaseKey(l.Subj, name)), append(g.args, l.ID), append(g.at, i)
	}
	return groups
}
