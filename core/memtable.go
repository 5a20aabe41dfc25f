package core

import "unique"

// memTable is one MemoryStore shard's buckets: an open-addressing hash
// table with linear probing, keyed by (policy name, subject). A decision
// hashes its subject once, for the shard and the table alike (see
// memShard.hash), and slots keep their key's hash, so a lookup costs that
// one hash, usually one or two probes and a string comparison; buckets
// sit in the slots themselves, with no pointer to follow. It replaces a Go
// map per shard only because it is faster (BENCHMARKS.md, "Tricks kept").
// It is not safe for concurrent use: its shard's mutex guards it.
type memTable struct {
	slots []memSlot // len is a power of two, at least minSlots; at most 3/4 used
	used  int
}

const minSlots = 8

// memSlot is one bucket and its key, in one 64-byte cache line.
type memSlot struct {
	hash    uint64 // never 0 for a bucket: 0 marks an empty slot
	name    unique.Handle[string]
	subject string
	memBucket
	_ [8]byte // a slot per cache line: a lookup reads one
}

// home is the slot where a key hashed to h is first looked for. The low
// bits of the subject's hash picked the shard, so the table uses high ones.
func home(h uint64, mask int) int { return int(h>>32) & mask }

// find returns the index of key (name, subject)'s slot and true, or, when
// the key is absent, the index of the empty slot where it would go and false.
func (t *memTable) find(h uint64, name unique.Handle[string], subject string) (int, bool) {
	mask := len(t.slots) - 1
	for i := home(h, mask); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.hash == h && sl.name == name && sl.subject == subject {
			return i, true
		}
		if sl.hash == 0 {
			return i, false
		}
	}
}

// lookup returns key (name, subject)'s bucket, or nil.
func (t *memTable) lookup(h uint64, name unique.Handle[string], subject string) *memBucket {
	if i, ok := t.find(h, name, subject); ok {
		return &t.slots[i].memBucket
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
	if 4*(t.used+1) > 3*len(t.slots) {
		t.resize(2 * len(t.slots))
	}
	i, _ := t.find(h, name, subject)
	t.slots[i] = memSlot{hash: h, name: name, subject: subject}
	t.used++
	return &t.slots[i].memBucket
}

// remove empties slot i, then moves back the entries after it that could
// no longer be found past an empty slot (backward-shift deletion: no
// tombstones, so probe sequences never lengthen with churn).
func (t *memTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i when i lies on its probe
		// sequence, from its home up to j.
		if (j-i)&mask <= (j-home(t.slots[j].hash, mask))&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = memSlot{}
	t.used--
}

// resize moves every entry into a table of n slots (a power of two, more
// than 4/3 of the entries).
func (t *memTable) resize(n int) {
	old := t.slots
	t.slots = make([]memSlot, n)
	for i := range old {
		if old[i].hash != 0 {
			j, _ := t.find(old[i].hash, old[i].name, old[i].subject)
			t.slots[j] = old[i]
		}
	}
}

// sweep drops buckets that are full again at now (they hold no
// information), then gives back memory the table no longer needs, as after
// a flood of one-off subjects.
func (t *memTable) sweep(now int64) {
	for i := 0; i < len(t.slots); {
		if sl := &t.slots[i]; sl.hash != 0 && sl.fullAt() <= now {
			// remove may move a later entry into i: look at i again.
			t.remove(i)
			continue
		}
		i++
	}
	if len(t.slots) > minSlots && 8*t.used < len(t.slots) {
		n := minSlots
		for 2*t.used >= n {
			n <<= 1
		}
		t.resize(n)
	}
}

// evictOne drops, among a few buckets sampled from around the home of a
// key hashed to h (a random place), the one that will be full soonest:
// forgetting it over-admits that subject the least. Buckets of subject (the
// decision making room, which may have just written one for another of its
// policies) are dropped only when every sample is one: dropping the bucket a
// decision has just counted in would forget that limit at once.
func (t *memTable) evictOne(h uint64, subject string) {
	mask := len(t.slots) - 1
	victim, own, n := -1, -1, min(8, t.used)
	var victimFull, ownFull int64
	for i, sampled := home(h, mask), 0; sampled < n; i = (i + 1) & mask {
		if sl := &t.slots[i]; sl.hash != 0 {
			full := sl.fullAt()
			if sl.subject == subject {
				if own < 0 || full < ownFull {
					own, ownFull = i, full
				}
			} else if victim < 0 || full < victimFull {
				victim, victimFull = i, full
			}
			sampled++
		}
	}
	if victim < 0 {
		victim = own
	}
	if victim >= 0 {
		t.remove(victim)
	}
}
