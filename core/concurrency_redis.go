package core

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseKey lays out the key of the leases of a subject already passed
// through hashSubject: <prefix>{<subject>}:<name>{leases}. The subject's
// hash tag comes first, so a subject's leases live in the slot of its
// buckets; no policy name holds braces, so no bucket has this key.
func (s *RedisStore) leaseKey(subj, name string) string {
	return s.prefix + "{" + subj + "}:" + name + "{leases}"
}

// acquireLease runs the acquireLease script: one round trip (two the
// first time, when Redis answers NOSCRIPT).
func (s *RedisStore) acquireLease(ctx context.Context, name, subj, id string, limit int, lease time.Duration) (leaseAnswer, error) {
	v, err := acquireLease.Run(ctx, s.client, []string{s.leaseKey(subj, name)}, id, limit, lease.Microseconds()).Slice()
	if err != nil {
		return leaseAnswer{}, err
	}
	return s.leaseReply(v, 5)
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
	s.ready.Store(true)
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
func (s *RedisStore) acquireWithRate(ctx context.Context, name, subj, id string, limit int, lease time.Duration, policies []Policy, each []Outcome) (leaseAnswer, Outcome, error) {
	keys := make([]string, 0, len(policies)+2)
	keys = append(keys, s.leaseKey(subj, name))
	args := make([]any, 0, 9+2*len(policies))
	args = append(args, id, limit, lease.Microseconds(), recordTTL(ctx), 1, len(policies), 0)
	for i := range policies {
		keys = append(keys, s.key(subj, policies[i].Name))
		args = append(args, policies[i].scriptArg())
	}
	keys = append(keys, s.recordKey(subj, s.idSeq.Add(1)))
	args = append(args, opTake, 1, len(policies))
	for i := range policies {
		args = append(args, i+1)
	}
	args = append(args, 1) // one request of that shape
	v, err := acquireWithRate.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return leaseAnswer{}, Outcome{}, err
	}
	a, err := s.leaseReply(v, 6)
	if err != nil {
		return leaseAnswer{}, Outcome{}, err
	}
	reply, ok := v[5].(string)
	if !ok {
		return leaseAnswer{}, Outcome{}, fmt.Errorf("%w: tokens' reply %T", ErrBadReply, v[5])
	}
	o, err := parseReply(reply, each)
	return a, o, err
}

// releaseLease removes lease id from its set, if there: one ZREM, which
// never touches another lease, and deletes the set with its last member.
func (s *RedisStore) releaseLease(ctx context.Context, name, subj, id string) error {
	return s.client.ZRem(ctx, s.leaseKey(subj, name), id).Err()
}

// maxRenewKeys bounds the leases of one renewLeases call (Lua's unpack
// and the reply stay small).
const maxRenewKeys = 1000

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
		cmds[0] = renewLeases.Run(ctx, s.client, groups[0].keys, groups[0].args...)
	} else {
		pipe := s.client.Pipeline()
		for i, g := range groups {
			cmds[i] = renewLeases.EvalSha(ctx, pipe, g.keys, g.args...)
		}
		_, _ = pipe.Exec(ctx)
		for i, g := range groups {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				// Loads the script where it is missing, once per node.
				cmds[i] = renewLeases.Run(ctx, s.client, g.keys, g.args...)
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
// Cluster or Ring, else one per maxRenewKeys leases.
func (s *RedisStore) renewGroups(name string, lease time.Duration, ls []*Lease) []*renewGroup {
	var groups []*renewGroup
	bySubj := make(map[string]*renewGroup)
	for i, l := range ls {
		var g *renewGroup
		switch {
		case s.split:
			g = bySubj[l.subj]
		case i%maxRenewKeys != 0:
			g = groups[len(groups)-1]
		}
		if g == nil {
			g = &renewGroup{args: []any{lease.Microseconds()}}
			groups = append(groups, g)
			if s.split {
				bySubj[l.subj] = g
			}
		}
		g.keys, g.args, g.at = append(g.keys, s.leaseKey(l.subj, name)), append(g.args, l.id), append(g.at, i)
	}
	return groups
}
