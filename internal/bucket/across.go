package bucket

import (
	"hash/maphash"
	"slices"
)

// applyAcross runs a, a decision across subjects (a.Across, checked by
// CheckAcross), with the scripts' arithmetic, under the locks of every
// shard its subjects live in, taken in shard order (so two such
// decisions never wait on each other in a cycle): every bucket is read,
// then written only if the whole is allowed. The clock is read once all
// are locked, so no bucket is reached out of clock order.
func (s *Table) applyAcross(a *Ask) Outcome {
	parts, policies := a.Across, a.Policies
	var hsBuf [8]uint64
	var shBuf [8]int
	hs, locked := hsBuf[:0], shBuf[:0]
	for i := range parts {
		h := maphash.Comparable(s.seed, parts[i].Subj)
		hs = append(hs, h)
		if j := int(h & s.mask); !slices.Contains(locked, j) {
			locked = append(locked, j)
		}
	}
	slices.Sort(locked)
	for _, j := range locked {
		s.shards[j].mu.Lock()
	}
	defer func() {
		for _, j := range locked {
			s.shards[j].mu.Unlock()
		}
	}()
	now := s.Now()
	var small [8]memRead
	reads := small[:0]
	allowed := true
	for i := range parts {
		p := &policies[i]
		k := memKeyOf(p)
		r := memRead{hash: keyHash(hs[i], &k), key: k, tokens: p.Capacity, own: notKept}
		if b := s.shards[hs[i]&s.mask].lookup(r.hash, k.name, parts[i].Subj); b != nil {
			r.tokens, r.own, r.st, r.clamped, r.ahead = b.read(p, k.shape, now)
			r.shape = b.shape
		}
		reads = append(reads, r)
		if r.tokens < int64(max(parts[i].N, 1))*p.Unit {
			allowed = false
		}
	}
	var best Outcome
	for i := range parts {
		p, r, n := &policies[i], &reads[i], parts[i].N
		sh := &s.shards[hs[i]&s.mask]
		var d Decision
		var left int64
		write := a.Op == OpRefund || allowed && n > 0
		switch {
		case a.Op == OpRefund:
			left = min(p.Capacity, r.tokens+int64(n)*p.Unit)
			d, _ = p.decide(left, 0, true, now)
		case write:
			d, left = p.decide(r.tokens, n, true, now)
		case r.own < 0:
			d, _ = p.decide(r.tokens, max(n, 1), false, now)
		default:
			sp := r.shape.Value()
			d = p.decideKept(&sp, r.own, r.st, r.tokens, max(n, 1), now)
		}
		d.Allowed = a.Op == OpRefund || allowed
		if write {
			sh.put(s, r, parts[i].Subj, r.written(p, a.Op, left, now))
		} else if a.Op == OpTake && r.ahead {
			sh.lookup(r.hash, r.key.name, parts[i].Subj).restamp(now)
		}
		o := d.Outcome(i)
		a.Each[i] = o
		if i == 0 || Binds(o, best) {
			best = o
		}
	}
	return best
}
