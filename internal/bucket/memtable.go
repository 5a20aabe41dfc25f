package bucket

import (
	"math"
	"unique"
)

// memTable is one Table shard's buckets, keyed by (policy name,
// subject): the buckets in slots, in the order they were made, and an
// open-addressing index of them with linear probing. A decision hashes
// its subject once, for the shard and the table alike (see keyHash); an
// index entry keeps 32 bits of its key's hash beside the slot's number,
// so a lookup costs that one hash, usually one or two probes in a small
// index and a string comparison in one slot. Buckets made together sit
// together, as a Go heap keeps them. It replaces a Go map per shard only
// because it is faster (BENCHMARKS.md, "Tricks kept"). It is not safe
// for concurrent use: its shard's mutex guards it.
type memTable struct {
	index []uint64  // tag<<32 | slot+1, 0 when empty; len a power of two, at least minSlots, at most 3/4 used
	slots []memSlot // the buckets, len used
	used  int
}

const minSlots = 8

// memSlot is one bucket and its key.
type memSlot struct {
	hash    uint64 // never 0
	name    unique.Handle[string]
	subject string
	memBucket
}

// tag is the part of a key's hash its index entry keeps. The low bits of
// the subject's hash picked the shard, so the table uses high ones.
func tag(h uint64) uint64 { return h >> 32 }

// home is the index entry where a key tagged t is first looked for.
func home(t uint64, mask int) int { return int(t) & mask }

// find returns the slot of key (name, subject) and true, or false when
// the key is absent.
func (t *memTable) find(h uint64, name unique.Handle[string], subject string) (int, bool) {
	mask := len(t.index) - 1
	for i := int(h>>32) & mask; t.index[i] != 0; i = (i + 1) & mask {
		if v := t.index[i]; v>>32 == h>>32 {
			if sl := &t.slots[uint32(v)-1]; sl.name == name && sl.subject == subject {
				return int(uint32(v) - 1), true
			}
		}
	}
	return 0, false
}

// lookup returns key (name, subject)'s bucket, or nil.
func (t *memTable) lookup(h uint64, name unique.Handle[string], subject string) *memBucket {
	if j, ok := t.find(h, name, subject); ok {
		return &t.slots[j].memBucket
	}
	return nil
}

// insert adds key (name, subject), absent from the table, with an empty
// bucket, and returns that bucket. When the table already holds limit
// buckets, it first evicts one (see evictOne), never one of subject's own
// while another is sampled. The pointer is valid until the table next
// changes.
func (t *memTable) insert(h uint64, name unique.Handle[string], subject string, limit int) *memBucket {
	if t.used >= limit {
		t.evictOne(h, subject)
	}
	if 4*(t.used+1) > 3*len(t.index) {
		t.resize(2 * len(t.index))
	}
	t.slots = append(t.slots, memSlot{hash: h, name: name, subject: subject})
	t.used++
	t.place(t.used - 1)
	return &t.slots[t.used-1].memBucket
}

// entryOf returns the index entry of slot j.
func (t *memTable) entryOf(j int) int {
	mask := len(t.index) - 1
	i := home(tag(t.slots[j].hash), mask)
	for uint32(t.index[i]) != uint32(j+1) {
		i = (i + 1) & mask
	}
	return i
}

// remove drops slot j: the last slot moves into its place. In the index,
// the entries after its own that could no longer be found past an empty
// one move back (backward-shift deletion: no tombstones, so probe
// sequences never lengthen with churn).
func (t *memTable) remove(j int) {
	mask := len(t.index) - 1
	i := t.entryOf(j)
	for k := (i + 1) & mask; t.index[k] != 0; k = (k + 1) & mask {
		// The entry at k may fill the hole at i when i lies on its probe
		// sequence, from its home up to k.
		if (k-i)&mask <= (k-home(t.index[k]>>32, mask))&mask {
			t.index[i] = t.index[k]
			i = k
		}
	}
	t.index[i] = 0
	last := t.used - 1
	if j != last {
		at := t.entryOf(last)
		t.slots[j] = t.slots[last]
		t.index[at] = t.index[at]&^0xffffffff | uint64(j+1)
	}
	t.slots[last] = memSlot{}
	t.slots = t.slots[:last]
	t.used--
}

// place indexes slot j, which is not yet.
func (t *memTable) place(j int) {
	mask, tg := len(t.index)-1, tag(t.slots[j].hash)
	i := home(tg, mask)
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	t.index[i] = tg<<32 | uint64(j+1)
}

// resize indexes every slot anew in n entries (a power of two, more than
// 4/3 of the slots).
func (t *memTable) resize(n int) {
	t.index = make([]uint64, n)
	for j := range t.slots {
		t.place(j)
	}
}

// sweep drops buckets that are full again at now (they hold no
// information), then gives back memory the table no longer needs, as after
// a flood of one-off subjects.
func (t *memTable) sweep(now int64) {
	for j := 0; j < t.used; {
		if t.slots[j].fullAt() <= now {
			// remove moves the last slot into j: look at j again.
			t.remove(j)
			continue
		}
		j++
	}
	if len(t.index) > minSlots && 8*t.used < len(t.index) {
		n := minSlots
		for 2*t.used >= n {
			n <<= 1
		}
		t.slots = append([]memSlot(nil), t.slots...)
		t.resize(n)
	}
}

// evictOne drops, among a few buckets sampled from a place that the hash
// h picks (a random one), the one that will be full soonest: forgetting it
// over-admits that subject the least. Buckets of subject (the decision
// making room, which may have just written one for another of its
// policies) are dropped only when every sample is one: dropping the bucket
// a decision has just counted in would forget that limit at once.
func (t *memTable) evictOne(h uint64, subject string) {
	if t.used == 0 {
		return
	}
	victim, own := -1, -1
	var victimFull, ownFull int64
	for j, n := int(tag(h)%uint64(t.used)), 0; n < min(8, t.used); j, n = (j+1)%t.used, n+1 {
		sl := &t.slots[j]
		full := sl.fullAt()
		if sl.subject == subject {
			if own < 0 || full < ownFull {
				own, ownFull = j, full
			}
		} else if victim < 0 || full < victimFull {
			victim, victimFull = j, full
		}
	}
	if victim < 0 {
		victim = own
	}
	t.remove(victim)
}

// memBucket is one bucket as a table keeps it: units under the policy
// that wrote it (its shape), stamped at ts.
type memBucket struct {
	units int64                      // tokens in units of shape at ts
	ts    int64                      // µs on the store's clock at the last write
	shape unique.Handle[policyShape] // the policy that wrote the bucket
}

// read returns the units b holds at now under p, whose shape is hp: under
// b's own policy, refilled at every tick boundary passed. When p is
// another policy, two readings are kept and the larger holds: b refilled
// under its own policy to now, then carried into p (see carry); and b as
// it was at its stamp, carried, then refilled at p's own rate since (st):
// the clamped state p refills from, whether or not p's decisions wrote
// anything. own is then the units under b's own policy (below 0 when it
// owes), else notKept; clamped reports that the first reading was
// clamped at 0 (b's own policy spent more than p's capacity: see carry):
// a write then keeps b in its own policy (see written). ahead reports a bucket
// stamped in a later tick than now (an injected clock moved back): it is
// read as of its stamp.
func (b *memBucket) read(p *Policy, hp unique.Handle[policyShape], now int64) (tokens, own, st int64, clamped, ahead bool) {
	if b.shape == hp {
		if p.Tick == 1 {
			ahead = b.ts > now
		} else {
			ahead = b.ts/p.Tick > now/p.Tick
		}
		return p.refill(b.units, b.ts, now), notKept, 0, false, ahead
	}
	sp := b.shape.Value()
	old := sp.policy()
	own = old.refill(b.units, b.ts, now)
	tokens, clamped = carry(p, &sp, own)
	at, _ := carry(p, &sp, b.units)
	st = p.refill(at, b.ts, max(now, b.ts))
	return max(tokens, st), own, st, clamped, b.ts/sp.tick > now/sp.tick
}

// written returns the bucket an operation of kind (OpTake, OpRefund or a
// waiting one) under p leaves holding left units under p, r read at now
// (tokens under p, own under the bucket's own policy sp: see read). It is
// p's, but sp's when p's units would lose what sp spent: when p's reading
// was clamped, and for any but a take, when the bucket or what is left
// owes (p's debt, healed at p's rate, would carry as a spend of less than
// p's capacity). A policy that spent it would take it again (DESIGN §3:
// admitted cost stays within the more generous limit's bound). sp's
// units are then own less what the operation took (plus what it gave
// back), at most sp's capacity, and a debt at least what it owes under
// p. What p has left it reads from the stamp: the stamp goes back by the
// ticks p's refill takes to reach it, and own by sp's refill over them,
// so sp reads the same now; no further than own allows.
func (r *memRead) written(p *Policy, kind int, left, now int64) memBucket {
	lossy := r.clamped || kind != OpTake && r.own != notKept && (left < 0 || r.own < 0)
	if !lossy {
		return memBucket{units: left, ts: now, shape: r.key.shape}
	}
	q := r.shape.Value()
	held, at := min(r.own+rescale(left-r.tokens, p, &q), q.capacity), now/q.tick
	if left < 0 {
		held = min(held, rescale(left, p, &q))
	}
	if left > 0 && held > 0 {
		back := at - CeilDiv((now/p.Tick-left/p.Refill)*p.Tick, q.tick)
		back = min(back, held/q.refill)
		if back > 0 {
			held, at = held-back*q.refill, at-back
		}
	}
	if at == now/q.tick {
		return memBucket{units: held, ts: now, shape: r.shape}
	}
	return memBucket{units: held, ts: at * q.tick, shape: r.shape}
}

// notKept is read's own for a bucket in the policy that reads it: no
// units count can be it (a debt stays above -2^53).
const notKept int64 = math.MinInt64

// restamp moves a bucket stamped ahead of now back to now, holding what it
// was read with (its units, at most its capacity) under its own policy: a
// clock moved back then refuses no longer than the RetryAfter it announces.
func (b *memBucket) restamp(now int64) {
	b.units = min(b.units, b.shape.Value().capacity)
	b.ts = now
}

// fullAt returns the µs at which b is full again under its own policy.
func (b *memBucket) fullAt() int64 {
	sp := b.shape.Value()
	if b.units >= sp.capacity {
		return b.ts
	}
	return (b.ts/sp.tick + CeilDiv(sp.capacity-b.units, sp.refill)) * sp.tick
}
