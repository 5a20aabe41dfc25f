package bucket

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unique"
)

// This file checks the memory store against a plain reference model of
// DESIGN §3 (a Go map of buckets, big-integer arithmetic), driven by the
// same random operations and an injected clock, and checks the open-
// addressing table's invariants directly, with hashes chosen to collide.

// refillRef is Policy.refill in exact arithmetic: units plus Refill for
// every tick boundary from ts to now (none when now is earlier), capped at
// Capacity.
func refillRef(p *Policy, units, ts, now int64) int64 {
	el := new(big.Int).Sub(big.NewInt(floorDivRef(now, p.Tick)), big.NewInt(floorDivRef(ts, p.Tick)))
	if el.Sign() < 0 {
		el.SetInt64(0)
	}
	v := el.Mul(el, big.NewInt(p.Refill))
	v.Add(v, big.NewInt(units))
	if v.Cmp(big.NewInt(p.Capacity)) >= 0 {
		return p.Capacity
	}
	return v.Int64()
}

// floorDivRef returns ⌊a/b⌋ for b > 0.
func floorDivRef(a, b int64) int64 {
	q, _ := new(big.Int).DivMod(big.NewInt(a), big.NewInt(b), new(big.Int)) // Euclidean: floor for b > 0
	return q.Int64()
}

// refillDiv is Policy.refill as it was before the 128-bit comparison, for
// the inputs where its arithmetic cannot overflow.
func refillDiv(p *Policy, units, ts, now int64) int64 {
	el := now - ts
	if el < 0 {
		el = 0
	}
	if units >= p.Capacity || el >= CeilDiv(p.Capacity-units, p.Refill) {
		return p.Capacity
	}
	return units + el*p.Refill
}

func TestRefillExact(t *testing.T) {
	t.Parallel()
	const maxNew = 1<<53 - 1 // the largest Refill (and Capacity) New accepts
	refills := []int64{1, 2, 3, 7, 1000, 1 << 31, 1<<32 + 1, 1 << 52, maxNew, 1 << 62, math.MaxInt64}
	caps := []int64{1, 2, 999, 1 << 32, 1<<53 - 1, 1 << 53, 1 << 62, math.MaxInt64}
	els := []int64{math.MinInt64 + 1, -1 << 53, -1, 0, 1, 2, 3, 1 << 20, 1 << 31, 1 << 32, 1<<32 + 1, 1 << 53, 9_223_372_036_854_775, 1 << 62, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(p Policy, units, el int64) {
		t.Helper()
		// ts and now chosen so that now - ts = el without overflow.
		var ts, now int64
		if el >= 0 {
			ts, now = -1, el-1
		} else {
			ts, now = 0, el
		}
		got := p.refill(units, ts, now)
		want := refillRef(&p, units, ts, now)
		if got != want {
			t.Fatalf("refill(units %d, el %d) with Capacity %d, Refill %d = %d, want %d", units, el, p.Capacity, p.Refill, got, want)
		}
		// Where the old division cannot overflow, it agrees too.
		if p.Capacity-units-1 <= math.MaxInt64-p.Refill {
			if old := refillDiv(&p, units, ts, now); old != got {
				t.Fatalf("refill(units %d, el %d) with Capacity %d, Refill %d = %d, the division gave %d", units, el, p.Capacity, p.Refill, got, old)
			}
		}
	}
	for _, r := range refills {
		for _, c := range caps {
			p := Policy{Capacity: c, Refill: r, Unit: 1, Tick: 1}
			units := []int64{0, 1, c / 2, c - 1, c, c - r, c - 2*r}
			for range 8 {
				units = append(units, rng.Int64N(c))
			}
			for _, u := range units {
				if u < 0 || u > c {
					continue
				}
				// Elapsed times around the exact point where the bucket fills.
				exact := []int64{}
				if need := c - u; need > 0 {
					q := need / r
					exact = append(exact, q-1, q, q+1, q+2)
				}
				for _, el := range append(exact, els...) {
					check(p, u, el)
				}
				for range 8 {
					check(p, u, rng.Int64()>>rng.IntN(63))
				}
			}
		}
	}
}

// refKey is a bucket's key in the reference model.
type refKey struct{ name, subject string }

// refBucket is a bucket in the reference model: units at µs ts under the
// policy that wrote it (nameless).
type refBucket struct {
	units, ts int64
	by        Policy
}

// refStore is DESIGN §3's token bucket with one Go map and big integers,
// as shared/STATE.md words it: buckets describe themselves.
type refStore map[refKey]refBucket

func ceilDivRef(a, b int64) int64 {
	q, m := new(big.Int).DivMod(big.NewInt(a), big.NewInt(b), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func nameless(p Policy) Policy {
	return Policy{Capacity: p.Capacity, Refill: p.Refill, Unit: p.Unit, Tick: p.Tick}
}

// read returns b's units at now under p: refilled under the policy that
// wrote it. Under another policy, the larger of two readings: those units
// carried (see carryRef), and the units b held at its stamp, carried, then
// refilled under p from the stamp. ahead: stamped in a later tick than
// now.
func (b refBucket) read(p *Policy, now int64) (tokens int64, ahead bool) {
	ahead = floorDivRef(b.ts, b.by.Tick) > floorDivRef(now, b.by.Tick)
	tok := refillRef(&b.by, b.units, b.ts, now)
	if b.by.Capacity == p.Capacity && b.by.Refill == p.Refill && b.by.Unit == p.Unit && b.by.Tick == p.Tick {
		return tok, ahead
	}
	st := refillRef(p, carryRef(&b.by, p, b.units), b.ts, now)
	return max(carryRef(&b.by, p, tok), st), ahead
}

// carryRef returns the units under p of tok units under q: a debt scaled,
// ⌈debt × Unit / q's Unit⌉, else capacity less what was spent, ⌈spent ×
// Unit / q's Unit⌉, clamped to [0, capacity].
func carryRef(q, p *Policy, tok int64) int64 {
	ceilScaled := func(x int64) *big.Int {
		v := new(big.Int).Mul(big.NewInt(x), big.NewInt(p.Unit))
		d, m := new(big.Int).DivMod(v, big.NewInt(q.Unit), new(big.Int))
		if m.Sign() != 0 {
			d.Add(d, big.NewInt(1))
		}
		return d
	}
	if tok < 0 {
		return -ceilScaled(-tok).Int64()
	}
	left := new(big.Int).Sub(big.NewInt(p.Capacity), ceilScaled(q.Capacity-tok))
	if left.Sign() < 0 {
		return 0
	}
	return left.Int64()
}

// outcome is one policy's answer with left units after the operation, with
// waits counted to a tick boundary from now.
func refOutcome(p *Policy, i int, allowed bool, left, need, now int64, retry bool) Outcome {
	phase := now - floorDivRef(now, p.Tick)*p.Tick
	o := Outcome{Allowed: allowed, Policy: i, Remaining: left / p.Unit}
	if retry && left < need {
		o.RetryAfter = time.Duration(ceilDivRef(need-left, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	if left < p.Capacity {
		o.ResetAfter = time.Duration(ceilDivRef(p.Capacity-left, p.Refill)*p.Tick-phase) * time.Microsecond
	}
	return o
}

// kept is the outcome under p of a decision that leaves k's bucket as it
// is (a denied take, a peek) holding tokens: its waits are found by
// searching the ticks of the bucket's own policy for the first at which it
// reads need, and capacity, under p (from now when stamped ahead).
func (m refStore) kept(k refKey, p *Policy, i int, allowed bool, tokens, need, now int64) Outcome {
	b, ok := m[k]
	if !ok || b.by.Capacity == p.Capacity && b.by.Refill == p.Refill && b.by.Unit == p.Unit && b.by.Tick == p.Tick {
		return refOutcome(p, i, allowed, tokens, need, now, true)
	}
	if floorDivRef(b.ts, b.by.Tick) > floorDivRef(now, b.by.Tick) {
		b = refBucket{min(b.units, b.by.Capacity), now, b.by}
	}
	// first returns the µs from now to the first at which the bucket reads
	// at least want under p (a tick boundary of one policy or the other).
	first := func(want int64) time.Duration {
		lo := int64(0)
		hi := (ceilDivRef(b.by.Capacity, b.by.Refill)+1)*b.by.Tick + (ceilDivRef(p.Capacity, p.Refill)+1)*p.Tick
		for lo < hi {
			mid := lo + (hi-lo)/2
			if got, _ := b.read(p, now+mid); got >= want {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return time.Duration(lo) * time.Microsecond
	}
	o := Outcome{Allowed: allowed, Policy: i, Remaining: tokens / p.Unit}
	if tokens < need {
		o.RetryAfter = first(need)
	}
	if tokens < p.Capacity {
		o.ResetAfter = first(p.Capacity)
	}
	return o
}

// apply runs op (OpTake, OpPeek, OpRefund) on subject's buckets under ps.
func (m refStore) apply(op int, now int64, subject string, n int, ps []Policy, each []Outcome) Outcome {
	tokens := make([]int64, len(ps))
	ahead := make([]bool, len(ps))
	allowed := true
	for i := range ps {
		p := &ps[i]
		tokens[i] = p.Capacity
		if b, ok := m[refKey{p.Name, subject}]; ok {
			tokens[i], ahead[i] = b.read(p, now)
		}
		if tokens[i] < int64(n)*p.Unit {
			allowed = false
		}
	}
	var best Outcome
	for i := range ps {
		p := &ps[i]
		k := refKey{p.Name, subject}
		need := int64(n) * p.Unit
		var o Outcome
		switch {
		case op == OpTake && allowed:
			o = refOutcome(p, i, true, tokens[i]-need, need, now, false)
			m.put(k, p, tokens[i], tokens[i]-need, now)
		case op == OpTake:
			o = m.kept(k, p, i, false, tokens[i], need, now)
			if ahead[i] {
				b := m[k]
				m[k] = refBucket{min(b.units, b.by.Capacity), now, b.by}
			}
		case op == OpPeek:
			o = m.kept(k, p, i, allowed, tokens[i], need, now)
		case op == OpRefund:
			left := min(p.Capacity, tokens[i]+need)
			o = refOutcome(p, i, true, left, need, now, false)
			m.put(k, p, tokens[i], left, now)
		}
		if each != nil {
			each[i] = o
		}
		switch {
		case i == 0:
			best = o
		case o.Allowed && o.Remaining < best.Remaining:
			best = o
		case !o.Allowed && o.RetryAfter > best.RetryAfter:
			best = o
		}
	}
	return best
}

// put writes k's bucket that an operation under p, which read tokens,
// left holding left units: in p, but kept in its own policy q when it
// spent beyond p's capacity (see clamped): q's units refilled to now,
// plus what the operation gave back (less what it took) rounded down, at
// most q's capacity, stamped back by the ticks p's refill takes to reach
// what p has left (q's units less q's refill over them), no further than
// those units allow.
func (m refStore) put(k refKey, p *Policy, tokens, left, now int64) {
	b, ok := m.clamped(k, p, now)
	if !ok {
		m[k] = refBucket{left, now, nameless(*p)}
		return
	}
	q := &b.by
	d := new(big.Int).Mul(big.NewInt(left-tokens), big.NewInt(q.Unit))
	d.Div(d, big.NewInt(p.Unit)) // Euclidean: rounded down
	held := min(refillRef(q, b.units, b.ts, now)+d.Int64(), q.Capacity)
	at := floorDivRef(now, q.Tick)
	if left > 0 && held > 0 {
		back := at - ceilDivRef((floorDivRef(now, p.Tick)-left/p.Refill)*p.Tick, q.Tick)
		if back = min(back, held/q.Refill); back > 0 {
			held, at = held-back*q.Refill, at-back
		}
	}
	ts := now
	if at != floorDivRef(now, q.Tick) {
		ts = at * q.Tick
	}
	m[k] = refBucket{held, ts, b.by}
}

// clamped returns k's bucket, and whether it is in another policy than
// p and spent more tokens than p's capacity by now (not in debt):
// carried, it reads 0, and how far beyond is lost.
func (m refStore) clamped(k refKey, p *Policy, now int64) (refBucket, bool) {
	b, ok := m[k]
	if !ok || b.by == nameless(*p) {
		return b, false
	}
	own := refillRef(&b.by, b.units, b.ts, now)
	spent := new(big.Int).Mul(big.NewInt(b.by.Capacity-own), big.NewInt(p.Unit))
	return b, own >= 0 && spent.Cmp(new(big.Int).Mul(big.NewInt(p.Capacity), big.NewInt(b.by.Unit))) > 0
}

// full reports whether key k's bucket is full at now (or absent).
func (m refStore) full(k refKey, now int64) bool {
	b, ok := m[k]
	return !ok || refillRef(&b.by, b.units, b.ts, now) == b.by.Capacity
}

// modelPolicies returns policies in groups of one name (one of them empty,
// and two that differ only in their last byte), from the smallest limits
// to the largest New accepts. The limits of a group share buckets: a
// bucket is read under one limit after another wrote it, also across time
// units (µs and ms ticks) and scales.
func modelPolicies(t *testing.T) [][]Policy {
	groups := []struct {
		name   string
		limits []Limit
	}{
		{"", []Limit{PerHour(3)}},
		{"a", []Limit{PerSecond(2), PerSecond(3), PerSecond(2).WithBurst(5)}},
		{"b", []Limit{{Rate: 1, Period: time.Microsecond, Burst: 5}}},
		// Ticks of µs, ms (123457 a day) and s (123456791 a day).
		{"p-1", []Limit{PerMinute(7).WithBurst(11), PerMinute(100), PerDay(123457).WithBurst(20), PerDay(123457), PerDay(123456791)}},
		{"p-2", []Limit{{Rate: 3, Period: 1700 * time.Microsecond, Burst: 4}, {Rate: 3, Period: 1700 * time.Millisecond, Burst: 4}}},
		{"huge-refill", []Limit{{Rate: 1<<53 - 2, Period: time.Microsecond, Burst: 1}}},
		{"huge-burst", []Limit{{Rate: 1, Period: time.Microsecond, Burst: 1<<53 - 1}, {Rate: 7, Period: time.Second, Burst: 1 << 30}}},
		{"slow", []Limit{{Rate: 1, Period: 100 * 365 * 24 * time.Hour, Burst: 2}, PerDay(100000).WithBurst(2), PerDay(123457).WithBurst(2)}},
	}
	var pool [][]Policy
	for _, g := range groups {
		var ps []Policy
		for _, l := range g.limits {
			one, err := Policies(NamedLimit{Name: "x", Limit: l})
			if err != nil {
				t.Fatalf("%v: %v", l, err)
			}
			one[0].Name = g.name // keep the empty name: direct store users may send it
			ps = append(ps, one[0])
		}
		pool = append(pool, ps)
	}
	return pool
}

// modelSubjects returns subjects that collide in their bytes as much as
// possible: binary, one byte apart, prefixes of each other, long.
func modelSubjects(rng *rand.Rand, n int) []string {
	subjects := []string{"\x00", "\x00\x00", "\xff", "k", "k\x00", "kk", strings.Repeat("x", 1<<16), strings.Repeat("x", 1<<16-1) + "y"}
	for len(subjects) < n {
		b := make([]byte, 1+rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(4)) // few distinct bytes: many near-equal subjects
		}
		subjects = append(subjects, string(b))
	}
	return subjects
}

// µsClock is a clock for WithClock that tests move in microseconds.
type µsClock struct {
	mu   sync.Mutex
	base time.Time
	us   int64
}

func (c *µsClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Duration(c.us) * time.Microsecond)
}

func (c *µsClock) set(us int64) {
	c.mu.Lock()
	c.us = us
	c.mu.Unlock()
}

// TestMemoryStoreModel drives the memory store and the reference model with
// the same random decisions, resets and clock moves (forward, backward,
// by years) and requires identical outcomes and bucket counts. Sweeps are
// disabled so that Len is exact: a swept bucket is full, and with a clock
// that moves back a full bucket and a missing one can differ (TestMemory-
// StoreModelSweeps covers sweeps).
func TestMemoryStoreModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 12; seed++ {
		runMemoryModel(t, seed, false)
	}
}

// TestMemoryStoreModelSweeps is TestMemoryStoreModel with a clock that
// never moves back and frequent sweeps: then a swept bucket and a full one
// decide alike, and every bucket not yet full must be kept.
func TestMemoryStoreModelSweeps(t *testing.T) {
	t.Parallel()
	for seed := uint64(100); seed < 112; seed++ {
		runMemoryModel(t, seed, true)
	}
}

func runMemoryModel(t *testing.T, seed uint64, sweeps bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	pool := modelPolicies(t)
	subjects := modelSubjects(rng, 300)
	clk := &µsClock{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts := []MemoryOption{WithClock(clk.Now), WithMaxKeys(1 << 30)}
	if sweeps {
		opts = append(opts, WithSweepInterval(time.Duration(1+rng.IntN(3000))*time.Microsecond))
	} else {
		opts = append(opts, WithSweepInterval(math.MaxInt64))
	}
	s := NewMemoryStore(opts...)
	model := refStore{}
	ctx := context.Background()
	var now int64
	const year = 365 * 24 * 3600 * 1e6
	for step := 0; step < 4000; step++ {
		switch op := rng.IntN(100); {
		case op < 15: // move the clock
			switch r := rng.IntN(20); {
			case r < 12:
				now += rng.Int64N(2000)
			case r < 15:
				now += rng.Int64N(3600e6)
			case r < 16:
				// Years: el × Refill passes 2^64. The store's clock
				// (time.Time.Sub) saturates at ±292 years: stay within 200.
				if now < 150*year {
					now += rng.Int64N(50 * year)
				}
			case sweeps:
			case r < 19:
				now -= rng.Int64N(5000)
			default:
				if now > -150*year {
					now -= rng.Int64N(50 * year)
				}
			}
			clk.set(now)
		case op < 20: // reset some policies of a subject
			subject := subjects[rng.IntN(len(subjects))]
			ps := pickPolicies(rng, pool)
			if err := s.Reset(ctx, subject, ps); err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				delete(model, refKey{p.Name, subject})
			}
		default: // decide
			subject := subjects[rng.IntN(len(subjects))]
			ps := pickPolicies(rng, pool)
			minCap := int64(math.MaxInt64)
			for _, p := range ps {
				minCap = min(minCap, p.Capacity/p.Unit)
			}
			n := 1
			if rng.IntN(3) == 0 {
				n = 1 + int(rng.Int64N(min(minCap, 20)))
			}
			op, call := OpTake, "Take"
			switch r := rng.IntN(20); {
			case r < 3:
				op, call = OpPeek, "Peek"
			case r < 6:
				op, call = OpRefund, "Refund"
			}
			want := make([]Outcome, len(ps))
			wantBest := model.apply(op, now, subject, n, ps, want)
			got := make([]Outcome, len(ps))
			var gotBest Outcome
			var err error
			switch {
			case op == OpTake && len(ps) == 1 && rng.IntN(2) == 0:
				// The Limiter's hot path.
				gotBest = s.Take1(subject, n, &ps[0]).Outcome(0)
				got[0] = gotBest
			case op == OpTake:
				gotBest, err = s.Take(ctx, subject, n, ps, got)
			case op == OpPeek:
				gotBest, err = s.Peek(ctx, subject, n, ps, got)
			default:
				gotBest, err = s.Refund(ctx, subject, n, ps, got)
			}
			if err != nil {
				t.Fatal(err)
			}
			if gotBest != wantBest || !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: %s(%.20q, %d, %v) at %d µs:\n got %+v %+v\nwant %+v %+v", seed, step, call, subject, n, names(ps), now, gotBest, got, wantBest, want)
			}
		}
		if step%50 == 0 || step == 3999 {
			checkStoreTables(t, s)
			if got := s.Len(); !sweeps && got != len(model) {
				t.Fatalf("seed %d step %d: Len = %d, model holds %d", seed, step, got, len(model))
			} else if sweeps {
				notFull := 0
				for k := range model {
					if !model.full(k, now) {
						notFull++
					}
				}
				if got < notFull || got > len(model) {
					t.Fatalf("seed %d step %d: Len = %d; the model holds %d buckets, %d not full", seed, step, got, len(model), notFull)
				}
			}
		}
	}
}

// pickPolicies returns 1–4 policies of distinct groups of pool, in a
// random order, each one of its group's at random.
func pickPolicies(rng *rand.Rand, pool [][]Policy) []Policy {
	k := 1
	if rng.IntN(3) == 0 {
		k = 2 + rng.IntN(3)
	}
	idx := rng.Perm(len(pool))[:k]
	ps := make([]Policy, k)
	for i, j := range idx {
		ps[i] = pool[j][rng.IntN(len(pool[j]))]
	}
	return ps
}

func names(ps []Policy) []string {
	var ns []string
	for _, p := range ps {
		ns = append(ns, strconv.Quote(p.Name))
	}
	return ns
}

// checkStoreTables checks every shard's table (see checkTable).
func checkStoreTables(t *testing.T, s *Table) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		err := checkTable(&sh.memTable, s.perShard)
		sh.mu.Unlock()
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
}

// checkTable checks a memTable's invariants: an index of a power-of-two
// size of at least minSlots, at most 3/4 and limit used, used counting the
// slots, each slot indexed once under its tag, no key twice, and every
// index entry reachable from its home without crossing an empty one (what
// a lookup after backward-shift deletion relies on).
func checkTable(t *memTable, limit int) error {
	n := len(t.index)
	if n < minSlots || n&(n-1) != 0 {
		return fmt.Errorf("index of %d", n)
	}
	if t.used > limit || 4*t.used > 3*n || t.used != len(t.slots) {
		return fmt.Errorf("%d used of %d entries (%d slots), limit %d", t.used, n, len(t.slots), limit)
	}
	mask := n - 1
	indexed := make([]int, len(t.slots))
	for i, v := range t.index {
		if v == 0 {
			continue
		}
		j := int(uint32(v)) - 1
		if j < 0 || j >= len(t.slots) {
			return fmt.Errorf("entry %d names slot %d of %d", i, j, len(t.slots))
		}
		indexed[j]++
		if v>>32 != tag(t.slots[j].hash) {
			return fmt.Errorf("entry %d: tag %x, slot %d's hash %x", i, v>>32, j, t.slots[j].hash)
		}
		for k := home(v>>32, mask); k != i; k = (k + 1) & mask {
			if t.index[k] == 0 {
				return fmt.Errorf("entry %d (home %d) is past empty entry %d", i, home(v>>32, mask), k)
			}
		}
	}
	seen := map[refKey]bool{}
	for j := range t.slots {
		sl := &t.slots[j]
		if indexed[j] != 1 {
			return fmt.Errorf("slot %d indexed %d times", j, indexed[j])
		}
		k := refKey{sl.name.Value(), sl.subject}
		if seen[k] {
			return fmt.Errorf("key %q twice", k)
		}
		seen[k] = true
		if i, ok := t.find(sl.hash, sl.name, sl.subject); !ok || i != j {
			return fmt.Errorf("find(%q) = %d, %v; it is at %d", k, i, ok, j)
		}
	}
	for j := len(t.slots); j < cap(t.slots); j++ {
		if t.slots[:cap(t.slots)][j] != (memSlot{}) {
			return fmt.Errorf("slot %d past the end keeps a bucket", j)
		}
	}
	return nil
}

// TestMemTableCollisions drives one table with keys whose hashes are all
// equal, or whose homes are all the last slot (every cluster wraps around
// the end), and checks the invariants and a model after every operation:
// only the full key, never the hash, may identify a bucket.
func TestMemTableCollisions(t *testing.T) {
	t.Parallel()
	type hasher func(k refKey, mask int) uint64
	hashers := map[string]hasher{
		"one hash": func(refKey, int) uint64 { return 0xdead_beef_0000_0001 },
		"last home": func(k refKey, mask int) uint64 {
			// Distinct hashes, same home: the last slot of the current size.
			return uint64(mask)<<32 | uint64(len(k.subject))<<1 | 1
		},
		"two ends": func(k refKey, mask int) uint64 {
			if len(k.name)%2 == 0 {
				return uint64(mask)<<32 | 1
			}
			return 1
		},
	}
	for name, hf := range hashers {
		t.Run(name, func(t *testing.T) {
			for seed := uint64(0); seed < 10; seed++ {
				rng := rand.New(rand.NewPCG(seed, 3))
				tab := memTable{index: make([]uint64, minSlots)}
				// A key's hash must not change with the table's size: fix it
				// at insertion, as the store does.
				hashes := map[refKey]uint64{}
				model := map[refKey]int64{}
				limit := 1 + rng.IntN(40)
				for step := 0; step < 1500; step++ {
					k := refKey{strings.Repeat("n", rng.IntN(3)), strings.Repeat("s", 1+rng.IntN(30))}
					h, ok := hashes[k]
					if !ok {
						h = hf(k, len(tab.index)-1)
					}
					switch op := rng.IntN(10); {
					case op < 6:
						if b := tab.lookup(h, unique.Make(k.name), k.subject); b != nil {
							if _, in := model[k]; !in {
								t.Fatalf("step %d: %q found, not in the model", step, k)
							}
							break
						}
						if _, in := model[k]; in {
							t.Fatalf("step %d: %q lost", step, k)
						}
						before := tab.used
						b := tab.insert(h, unique.Make(k.name), k.subject, limit)
						setFull(b, rng.Int64N(100))
						hashes[k] = h
						if before == limit {
							for mk := range model {
								if tab.lookup(hashes[mk], unique.Make(mk.name), mk.subject) == nil {
									delete(model, mk)
									delete(hashes, mk)
									break
								}
							}
						}
						model[k] = b.fullAt()
					case op < 9:
						if i, found := tab.find(h, unique.Make(k.name), k.subject); found {
							tab.remove(i)
							delete(hashes, k)
						}
						delete(model, k)
					default:
						now := rng.Int64N(100)
						tab.sweep(now)
						for mk, full := range model {
							if full <= now {
								delete(model, mk)
								delete(hashes, mk)
							}
						}
					}
					if err := checkTable(&tab, limit); err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					if tab.used != len(model) {
						t.Fatalf("seed %d step %d: used %d, model %d", seed, step, tab.used, len(model))
					}
					for mk, full := range model {
						if b := tab.lookup(hashes[mk], unique.Make(mk.name), mk.subject); b == nil || b.fullAt() != full {
							t.Fatalf("seed %d step %d: %q: %v, want full %d", seed, step, mk, b, full)
						}
					}
				}
			}
		})
	}
}

// TestMemTableWrapRemove: a cluster that wraps around the end of the
// table, emptied in every order, keeps every other entry findable.
func TestMemTableWrapRemove(t *testing.T) {
	t.Parallel()
	// Homes 6, 6, 7, 7, 0: slots 6, 7, 0, 1, 2.
	homes := []uint64{6, 6, 7, 7, 0}
	var perm func([]int, int)
	perm = func(order []int, k int) {
		if k == len(order) {
			tab := memTable{index: make([]uint64, minSlots)}
			for i, hm := range homes {
				tab.insert(hm<<32|uint64(i)<<1|1, unique.Make("n"), strconv.Itoa(i), 100)
			}
			left := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}
			for _, r := range order {
				j, ok := tab.find(homes[r]<<32|uint64(r)<<1|1, unique.Make("n"), strconv.Itoa(r))
				if !ok {
					t.Fatalf("order %v: %d lost", order, r)
				}
				tab.remove(j)
				delete(left, r)
				if err := checkTable(&tab, 100); err != nil {
					t.Fatalf("order %v, after removing %d: %v", order, r, err)
				}
				for i := range left {
					if _, ok := tab.find(homes[i]<<32|uint64(i)<<1|1, unique.Make("n"), strconv.Itoa(i)); !ok {
						t.Fatalf("order %v, after removing %d: %d lost", order, r, i)
					}
				}
			}
			return
		}
		for i := k; i < len(order); i++ {
			order[k], order[i] = order[i], order[k]
			perm(order, k+1)
			order[k], order[i] = order[i], order[k]
		}
	}
	perm([]int{0, 1, 2, 3, 4}, 0)
}

// TestMemoryEmptyPolicyName: a policy named "" (a direct store user may
// send one) keeps its bucket whatever policy the shard decided last. The
// shard's memoized name hash once started as ("", 0) while "" hashes to
// something else: the bucket's hash then depended on the shard's history.
func TestMemoryEmptyPolicyName(t *testing.T) {
	t.Parallel()
	ps, err := Policies(NamedLimit{Name: "a", Limit: PerHour(1)})
	if err != nil {
		t.Fatal(err)
	}
	named, empty := ps[0], ps[0]
	empty.Name = ""
	s := NewMemoryStore()
	ctx := context.Background()
	for i, step := range []struct {
		p       Policy
		allowed bool
	}{{empty, true}, {named, true}, {empty, false}, {named, false}} {
		o, err := s.Take(ctx, "k", 1, []Policy{step.p}, nil)
		if err != nil || o.Allowed != step.allowed {
			t.Fatalf("decision %d (policy %q): allowed %v, %v; want %v", i, step.p.Name, o.Allowed, err, step.allowed)
		}
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
}

// TestMemoryKeyCapBounds floods stores of every cap (zero, negative, one,
// below and around the shard count, odd, huge) with unique subjects under
// two policies: the buckets stay within the cap (raised to the shard
// count), the tables within twice 4/3 of it, and once everything refills a
// sweep gives the memory back.
func TestMemoryKeyCapBounds(t *testing.T) {
	t.Parallel()
	ps, err := Policies(NamedLimit{Name: "s", Limit: PerSecond(5)}, NamedLimit{Name: "h", Limit: PerHour(100)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, maxKeys := range []int{math.MinInt, -1, 0, 1, 15, 16, 17, 1000, 4097, math.MaxInt} {
		clk := &µsClock{base: time.Now()}
		s := NewMemoryStore(WithClock(clk.Now), WithMaxKeys(maxKeys), WithSweepInterval(time.Minute))
		bound := max(maxKeys, len(s.shards))
		if maxKeys == math.MaxInt {
			bound = math.MaxInt
		}
		var now int64
		for i := 0; i < 20000; i++ {
			now += 10
			clk.set(now)
			sub := "flood-" + strconv.Itoa(i)
			if i%2 == 0 {
				s.Take(ctx, sub, 1, ps, nil)
			} else {
				s.Take1(sub, 1, &ps[i%4/2])
			}
			if i%1000 == 999 {
				if got := s.Len(); got > bound {
					t.Fatalf("WithMaxKeys(%d): Len = %d after %d unique subjects, bound %d", maxKeys, got, i+1, bound)
				}
			}
		}
		checkStoreTables(t, s)
		slots := 0
		for i := range s.shards {
			slots += len(s.shards[i].index)
		}
		if used := s.Len(); slots > max(minSlots*len(s.shards), 8*used/3+minSlots*len(s.shards)) {
			t.Fatalf("WithMaxKeys(%d): %d slots for %d buckets", maxKeys, slots, used)
		}
		// Everything refills; touching every shard sweeps it.
		now += 2 * 3600e6
		clk.set(now)
		for i := 0; i < 50*len(s.shards); i++ {
			s.Take1("touch-"+strconv.Itoa(i), 1, &ps[0]) // locks the shard: sweeps it when due
		}
		slots = 0
		for i := range s.shards {
			slots += len(s.shards[i].index)
		}
		if used := s.Len(); used > 50*len(s.shards) || slots > 8*minSlots*len(s.shards)+8*used {
			t.Fatalf("WithMaxKeys(%d): after a sweep of full buckets, %d buckets in %d slots", maxKeys, used, slots)
		}
	}
}

// TestMemoryEvictionSparesTheDecision: at the key cap, a multi-policy
// decision on a new subject never evicts the bucket it has just written
// for another of its policies (which would forget the limit it just
// counted), as long as the shard can hold them both.
func TestMemoryEvictionSparesTheDecision(t *testing.T) {
	t.Parallel()
	ps, err := Policies(
		NamedLimit{Name: "second", Limit: PerSecond(5)},
		NamedLimit{Name: "hour", Limit: PerHour(100)},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, maxKeys := range []int{64, 1024} {
		// A frozen clock: a refill between a subject's two decisions (a
		// stall of 200 ms on a loaded machine) would read as an eviction.
		frozen := time.Now()
		s := NewMemoryStore(WithMaxKeys(maxKeys), WithClock(func() time.Time { return frozen }))
		ctx := context.Background()
		each := make([]Outcome, 2)
		lost := 0
		const subjects = 20000
		for i := range subjects {
			subj := fmt.Sprint("flood-", i)
			if o, err := s.Take(ctx, subj, 1, ps, nil); err != nil || !o.Allowed {
				t.Fatalf("%s: %+v %v", subj, o, err)
			}
			// Both buckets must still hold the first request.
			if _, err := s.Take(ctx, subj, 1, ps, each); err != nil {
				t.Fatal(err)
			}
			if each[0].Remaining != 3 || each[1].Remaining != 98 {
				lost++
			}
		}
		if lost != 0 {
			t.Errorf("WithMaxKeys(%d): %d of %d decisions found a bucket of their own evicted", maxKeys, lost, subjects)
		}
	}
}
