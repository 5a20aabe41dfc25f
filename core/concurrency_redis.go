package core

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// leaseKey lays out the key of the leases of a subject already passed
// through transport.HashSubject: <prefix>{<subject>}:<name>{leases}. The subject's
// hash tag comes first, so a subject's leases live in the slot of its
// buckets; no policy name holds braces, so no bucket has this key.
func (s *RedisStore) leaseKey(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name + "{leases}"
}

// leaseRequest is one acquire of a slot: of subj's set under name (subj
// as the store keys it), for lease id, held at most max at once and each
// for lease; with policies (a Concurrency's Rate), one token of them too,
// all or nothing. The store fills each (every policy's outcome, when not
// nil) and rate (the binding one).
type leaseRequest struct {
	name     string
	subj     string
	id       string
	max      int
	localMax int // FailLocal's share of max
	lease    time.Duration
	timeout  time.Duration // bounds the call that takes back a lost acquire
	policies []bucket.Policy
	each     []bucket.Outcome
	rate     bucket.Outcome
}

// acquire takes a slot for req by deadline, as decisions are bounded (see
// leaseCall): one acquireLease script call, or acquireWithRate for a req
// with policies (two round trips the first time, when Redis answers
// NOSCRIPT). It settles, in this one place, what becomes of an acquire
// whose caller was not told it was granted: one that failed (its reply
// may be lost after the script added the lease) or that answered after
// its caller stopped waiting is taken back by the call itself, best
// effort within req.timeout, rather than hold a phantom slot for a
// Lease. Its tokens, if any, stay spent.
func (s *RedisStore) acquire(ctx context.Context, deadline time.Time, bound int64, req *leaseRequest) (leaseAnswer, error) {
	var a leaseAnswer
	err := s.leaseCall(ctx, deadline, bound, req.subj, func(ctx context.Context) error {
		if req.policies != nil {
			var err error
			a, err = s.acquireWithRate(ctx, req)
			return err
		}
		v, err := acquireLease.Run(ctx, s.t.Client(), []string{s.leaseKey(req.subj, req.name)}, req.id, req.max, req.lease.Microseconds()).Slice()
		if err == nil {
			a, err = s.leaseReply(v, 5)
		}
		return err
	}, func(err error, left bool) {
		if err != nil || (left && a.allowed) {
			go func() { _ = s.release(ctx, time.Now().Add(req.timeout), 0, req.name, req.subj, req.id) }()
		}
	})
	if err != nil {
		return leaseAnswer{}, err // a may still be written by a call running late
	}
	return a, nil
}

// leaseCall makes the lease call f for subj by deadline, bounded as the
// store's decisions are (see transport.Store.Do): counted among the decisions
// running in the store, against bound (ErrOverloaded beyond it); on the
// caller's goroutine under deadline while calls to subj's node are fast
// and the client honours deadlines, else on a goroutine of its own under
// at least transport.MinSend (a call cut at Timeout would cost its connection),
// which the caller waits for until deadline (then context.DeadlineExceeded).
// done, if not nil, runs on the goroutine that ran f, once f returned,
// with f's error and whether the caller had stopped waiting by then.
func (s *RedisStore) leaseCall(ctx context.Context, deadline time.Time, bound int64, subj string, f func(context.Context) error, done func(err error, left bool)) error {
	if !s.t.Enter(bound) {
		return ErrOverloaded
	}
	last := s.t.LastTo(subj)
	if s.t.Fast(last, deadline) {
		ctx := s.t.Context(ctx, deadline)
		err := s.t.Run(ctx, last, f, deadline)
		ctx.Stop()
		s.t.Leave()
		if done != nil {
			done(err, false)
		}
		return err
	}
	send := time.Now().Add(transport.MinSend)
	if deadline.After(send) {
		send = deadline
	}
	callCtx := s.t.Context(ctx, send)
	const waiting, left, answered = 0, 1, 2
	var state atomic.Int32
	answer := make(chan error, 1)
	go func() {
		err := s.t.Run(callCtx, last, f, time.Time{})
		callCtx.Stop()
		s.t.Leave()
		gone := !state.CompareAndSwap(waiting, answered)
		if done != nil {
			done(err, gone)
		}
		if !gone {
			answer <- err
		}
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-answer:
		return err
	case <-t.C:
	}
	if !state.CompareAndSwap(waiting, left) {
		return <-answer // answered as the deadline came: the answer stands
	}
	return context.DeadlineExceeded
}

// leaseReply reads the lease part of an acquire's reply v, whose length
// must be want.
func (s *RedisStore) leaseReply(v []any, want int) (leaseAnswer, error) {
	if len(v) != want {
		return leaseAnswer{}, fmt.Errorf("%w: %d values", ErrBadReply, len(v))
	}
	var n [5]int64
	for i := range n {
		x, ok := v[i].(int64)
		if !ok {
			return leaseAnswer{}, fmt.Errorf("%w: %T", ErrBadReply, v[i])
		}
		n[i] = x
	}
	s.t.Ready()
	return leaseAnswer{
		allowed:    n[0] == 1,
		held:       int(n[1]),
		retryAfter: time.Duration(max(n[2], 0)) * time.Microsecond,
		resetAfter: time.Duration(max(n[3], 0)) * time.Microsecond,
		pruned:     int(n[4]),
	}, nil
}

// acquireWithRate runs the acquireWithRate script: a slot of subj and
// one token under policies (the buckets of subj, as tokenBuckets keys
// them), all or nothing, in one round trip. It fills each with every
// policy's outcome and returns the binding one.
func (s *RedisStore) acquireWithRate(ctx context.Context, req *leaseRequest) (leaseAnswer, error) {
	policies, subj := req.policies, req.subj
	keys := make([]string, 0, len(policies)+2)
	keys = append(keys, s.leaseKey(subj, req.name))
	args := make([]any, 0, 9+2*len(policies))
	args = append(args, req.id, req.max, req.lease.Microseconds(), transport.RecordTTL(ctx), 1, len(policies), 0)
	for i := range policies {
		keys = append(keys, s.t.Key(subj, policies[i].Name))
		args = append(args, policies[i].Arg())
	}
	keys = append(keys, s.t.RecordKey(subj))
	args = append(args, bucket.OpTake, 1, len(policies))
	for i := range policies {
		args = append(args, i+1)
	}
	args = append(args, 1) // one request of that shape
	v, err := acquireWithRate.Run(ctx, s.t.Client(), keys, args...).Slice()
	if err != nil {
		return leaseAnswer{}, err
	}
	a, err := s.leaseReply(v, 6)
	if err != nil {
		return leaseAnswer{}, err
	}
	reply, ok := v[5].(string)
	if !ok {
		return leaseAnswer{}, fmt.Errorf("%w: tokens' reply %T", ErrBadReply, v[5])
	}
	req.rate, err = transport.ParseReply(reply, req.each)
	return a, err
}

// release removes lease id from its set, if there, by deadline: one
// ZREM, which never touches another lease, and deletes the set with its
// last member.
func (s *RedisStore) release(ctx context.Context, deadline time.Time, bound int64, name, subj, id string) error {
	return s.leaseCall(ctx, deadline, bound, subj, func(ctx context.Context) error {
		return s.t.Client().ZRem(ctx, s.leaseKey(subj, name), id).Err()
	}, nil)
}

// renew renews ls (at most maxRenewLeases: one renewal chunk) by
// deadline, in one bounded call (see renewLeases).
func (s *RedisStore) renew(ctx context.Context, deadline time.Time, bound int64, name string, lease time.Duration, ls []*Lease) ([]renewal, error) {
	var got []renewal
	err := s.leaseCall(ctx, deadline, bound, ls[0].subj, func(ctx context.Context) (err error) {
		got, err = s.renewLeases(ctx, name, lease, ls)
		return err
	}, nil)
	if err != nil {
		// Unknown (renewUnknown), tried again next round; got may still
		// be written by a call running late.
		return make([]renewal, len(ls)), err
	}
	return got, nil
}

// maxRenewLeases bounds the leases of one renewal call (Lua's unpack and
// the reply stay small, and a chunk takes Redis well under a Timeout):
// a round renews its leases in chunks, each a store call of its own.
const maxRenewLeases = 500

// renewLeases renews leases (all of one Concurrency, so of one name and
// lease) and reports, per lease, renewed, expired or gone (never brought
// back), or unknown (its call failed). A standalone or Sentinel Redis gets
// one script call for up to maxRenewKeys leases; a Cluster or Ring one
// pipeline, with a call per subject (a script's keys must share a slot),
// which go-redis sends as one batch per node.
func (s *RedisStore) renewLeases(ctx context.Context, name string, lease time.Duration, ls []*Lease) ([]renewal, error) {
	out := make([]renewal, len(ls))
	groups := s.renewGroups(name, lease, ls)
	cmds := make([]*redis.Cmd, len(groups))
	if len(groups) == 1 {
		cmds[0] = renewLeases.Run(ctx, s.t.Client(), groups[0].keys, groups[0].args...)
	} else {
		pipe := s.t.Client().Pipeline()
		for i, g := range groups {
			cmds[i] = renewLeases.EvalSha(ctx, pipe, g.keys, g.args...)
		}
		_, _ = pipe.Exec(ctx)
		for i, g := range groups {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				// Loads the script where it is missing, once per node.
				cmds[i] = renewLeases.Run(ctx, s.t.Client(), g.keys, g.args...)
			}
		}
	}
	var firstErr error
	for i, g := range groups {
		v, err := cmds[i].Slice()
		if err == nil && len(v) != len(g.at) {
			err = fmt.Errorf("%w: %d values", ErrBadReply, len(v))
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			for _, at := range g.at {
				out[at] = renewUnknown
			}
			continue
		}
		for j, at := range g.at {
			switch n, _ := v[j].(int64); n {
			case 1:
				out[at] = renewed
			case 2:
				out[at] = renewExpired
			default:
				out[at] = renewGone
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
func (s *RedisStore) renewGroups(name string, lease time.Duration, ls []*Lease) []*renewGroup {
	var groups []*renewGroup
	bySubj := make(map[string]*renewGroup)
	for i, l := range ls {
		var g *renewGroup
		switch {
		case s.t.Split():
			g = bySubj[l.subj]
		case i > 0:
			g = groups[0]
		}
		if g == nil {
			g = &renewGroup{args: []any{lease.Microseconds()}}
			groups = append(groups, g)
			if s.t.Split() {
				bySubj[l.subj] = g
			}
		}
		g.keys, g.args, g.at = append(g.keys, s.leaseKey(l.subj, name)), append(g.args, l.id), append(g.at, i)
	}
	return groups
}
