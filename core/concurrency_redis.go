package core

import (
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
	if len(v) != 4 {
		return leaseAnswer{}, fmt.Errorf("%w: %d values", ErrBadReply, len(v))
	}
	var n [4]int64
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
	}, nil
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
// lease) and reports, per lease, renewed, gone (never brought back) or
// unknown (its call failed). A standalone
// or Sentinel Redis gets one script call for up to maxRenewKeys leases; a
// Cluster or Ring one pipeline, with a call per subject (a script's keys
// must share a slot), which go-redis sends as one batch per node.
func (s *RedisStore) renewLeases(ctx context.Context, name string, lease time.Duration, ls []*Lease) ([]renewal, error) {
	out := make([]renewal, len(ls))
	type group struct {
		keys []string
		args []any
		at   []int // indexes in ls
	}
	var groups []*group
	if s.split {
		bySubj := make(map[string]*group)
		for i, l := range ls {
			g := bySubj[l.subj]
			if g == nil {
				g = &group{args: []any{lease.Microseconds()}}
				bySubj[l.subj] = g
				groups = append(groups, g)
			}
			g.keys, g.args, g.at = append(g.keys, s.leaseKey(l.subj, name)), append(g.args, l.id), append(g.at, i)
		}
	} else {
		for i, l := range ls {
			if i%maxRenewKeys == 0 {
				groups = append(groups, &group{args: []any{lease.Microseconds()}})
			}
			g := groups[len(groups)-1]
			g.keys, g.args, g.at = append(g.keys, s.leaseKey(l.subj, name)), append(g.args, l.id), append(g.at, i)
		}
	}
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
			if firstErr == nil {
				firstErr = err
			}
			for _, at := range g.at {
				out[at] = renewUnknown
			}
			continue
		}
		for j, at := range g.at {
			if n, _ := v[j].(int64); n == 1 {
				out[at] = renewed
			} else {
				out[at] = renewGone
			}
		}
	}
	return out, firstErr
}
