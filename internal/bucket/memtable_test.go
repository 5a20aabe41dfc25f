package bucket

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unique"
)

// setFull makes b a bucket that is full again at µs full, 0 ≤ full < 2^40.
func setFull(b *memBucket, full int64) {
	const c = 1 << 40
	*b = memBucket{units: c - full, shape: unique.Make(policyShape{capacity: c, refill: 1, unit: 1, tick: 1})}
}

// TestMemTableModel runs random inserts, removals, sweeps and evictions
// against a plain map. The hashes are drawn from a few values so that
// probe sequences collide, wrap around the end of the table and are shifted back
// by removals.
func TestMemTableModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		type key struct{ name, subject string }
		// Homes at both ends of any table, so that clusters wrap around.
		homes := []uint64{0, 1, 5, 1<<32 - 2, 1<<32 - 1}
		hashOf := func(k key) uint64 {
			return homes[int(k.subject[len(k.subject)-1])%len(homes)]<<32 | uint64(k.subject[0])<<1 | 1
		}
		tab := memTable{index: make([]uint64, minSlots)}
		model := map[key]int64{} // key → full
		const limit = 100
		for step := 0; step < 5000; step++ {
			k := key{"p" + strconv.Itoa(rng.IntN(2)), strconv.Itoa(rng.IntN(300))}
			h := hashOf(k)
			switch op := rng.IntN(10); {
			case op < 6:
				if b := tab.lookup(h, unique.Make(k.name), k.subject); b != nil {
					if _, ok := model[k]; !ok {
						t.Fatalf("seed %d step %d: %v found, not in the model", seed, step, k)
					}
					setFull(b, rng.Int64N(1000))
					model[k] = b.fullAt()
					break
				}
				if _, ok := model[k]; ok {
					t.Fatalf("seed %d step %d: %v lost", seed, step, k)
				}
				n := tab.used
				b := tab.insert(h, unique.Make(k.name), k.subject, limit)
				setFull(b, rng.Int64N(1000))
				if n == limit {
					// One bucket was evicted: find which.
					for mk := range model {
						if tab.lookup(hashOf(mk), unique.Make(mk.name), mk.subject) == nil {
							delete(model, mk)
							break
						}
					}
				}
				model[k] = b.fullAt()
			case op < 9:
				if i, ok := tab.find(h, unique.Make(k.name), k.subject); ok {
					tab.remove(i)
				}
				delete(model, k)
			default:
				now := rng.Int64N(1000)
				tab.sweep(now)
				for mk, full := range model {
					if full <= now {
						delete(model, mk)
					}
				}
			}
			if tab.used != len(model) {
				t.Fatalf("seed %d step %d: used = %d, model has %d", seed, step, tab.used, len(model))
			}
			for mk, full := range model {
				b := tab.lookup(hashOf(mk), unique.Make(mk.name), mk.subject)
				if b == nil || b.fullAt() != full {
					t.Fatalf("seed %d step %d: %v: got %v, want full %d", seed, step, mk, b, full)
				}
			}
			if tab.used > limit || 4*tab.used > 3*len(tab.index) {
				t.Fatalf("seed %d step %d: %d used of %d entries, limit %d", seed, step, tab.used, len(tab.index), limit)
			}
		}
	}
}
