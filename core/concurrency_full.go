package core

import (
	"hash/maphash"
	"sync"
	"time"
)

// fullSets remembers the keys whose slots the store found full, so that
// a flood of acquires on a full key is refused by this instance without a
// store call each (DESIGN §2a: a client's own traffic never degrades
// decisions). An entry lasts until the earliest lease of the key ends, at
// most fullFor, or until this instance releases one of the key's leases;
// a slot freed by another instance is seen at the latest then. It only
// ever refuses, and only what the store refused less than fullFor ago.
//
// Memory is bounded: each shard holds at most its share of fullMaxKeys,
// drops ended entries when full, and otherwise does not cache.
type fullSets struct {
	seed   maphash.Seed
	shards [16]fullShard
}

type fullShard struct {
	mu sync.Mutex
	m  map[string]fullSet
}

// fullSet is a refused acquire's answer, times on the owner's clock (ns).
type fullSet struct {
	until int64 // the entry ends: min(earliest lease end, answer + fullFor)
	first int64 // the earliest lease ends (RetryAfter)
	last  int64 // the latest lease ends (ResetAfter)
}

const (
	// fullFor bounds how long an entry lasts.
	fullFor = time.Second
	// fullMaxKeys bounds the entries of one Concurrency.
	fullMaxKeys = 1 << 16
)

func newFullSets() *fullSets {
	f := &fullSets{seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].m = make(map[string]fullSet)
	}
	return f
}

func (f *fullSets) shard(subj string) *fullShard {
	return &f.shards[maphash.String(f.seed, subj)%uint64(len(f.shards))]
}

// refused returns the answer to an acquire of subj at now when its set is
// known full, and whether it is.
func (f *fullSets) refused(subj string, now int64) (leaseAnswer, bool) {
	sh := f.shard(subj)
	sh.mu.Lock()
	e, ok := sh.m[subj]
	sh.mu.Unlock()
	if !ok || now >= e.until {
		return leaseAnswer{}, false
	}
	return leaseAnswer{retryAfter: time.Duration(e.first - now), resetAfter: time.Duration(e.last - now)}, true
}

// record learns from the store's answer a to an acquire of subj sent at
// sent (so its times are measured from no later than the store's): a
// refusal is remembered, a grant forgets the key.
func (f *fullSets) record(subj string, sent int64, a leaseAnswer) {
	sh := f.shard(subj)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if a.allowed || a.retryAfter <= 0 {
		delete(sh.m, subj)
		return
	}
	e := fullSet{first: sent + int64(a.retryAfter), last: sent + int64(a.resetAfter)}
	e.until = min(e.first, sent+int64(fullFor))
	if _, ok := sh.m[subj]; !ok && len(sh.m) >= fullMaxKeys/len(f.shards) {
		for k, old := range sh.m {
			if sent >= old.until {
				delete(sh.m, k)
			}
		}
		if len(sh.m) >= fullMaxKeys/len(f.shards) {
			return
		}
	}
	sh.m[subj] = e
}

// forget drops subj's entry: this instance released one of its leases.
func (f *fullSets) forget(subj string) {
	sh := f.shard(subj)
	sh.mu.Lock()
	delete(sh.m, subj)
	sh.mu.Unlock()
}
