package bucket

import (
	"cmp"
	"math/bits"
	"slices"
)

// Lender is a bucket that lends slices of itself to instances, which then
// decide from them in process (DESIGN §14, core's Config.Borrow): the
// model of the store's side of borrowing, in the units and ticks of a
// Policy, exact as the rest of this package.
//
// The bucket keeps the units out on loan (L) and caps its refill at
// Capacity − L, so that every admission — taken from the bucket, or from
// a slice — conforms to the plain bucket: at most Capacity + Refill per
// tick boundary in any interval. The proof: let Φ be the level plus the
// units of the loans still recorded, not yet spent. A take from the level
// or from a slice lowers Φ by what it admits; a borrow moves units from
// the level to a loan; a return moves a loan's unspent units back (capped)
// and an expiry drops them, neither raising Φ; only refill raises it, by
// at most Refill a tick, and never above Capacity, since the level is held
// at or below Capacity − L ≤ Capacity − (unspent on loan). So an interval
// admits at most Φ at its start plus its refill: Capacity plus Refill a
// tick boundary. Two rules make it hold across instances:
//
//   - an instance decides from a slice only until its own loan end, which
//     is the term after it sent the borrow, so never after the store's
//     (the term after the store decided it, later);
//   - a return counts only for a loan still recorded: one that arrives
//     after the loan's end gives nothing back (its unspent units were
//     dropped already), and a re-sent one finds the loan gone.
//
// The price is under-use: while loans are out, refill stops L short of
// Capacity, and units lent and never spent come back only by a return or
// at the loan's end.
//
// A Lender keeps Held, the level plus L, rather than the level: Held
// refills exactly as a plain bucket's units do, capped at Capacity (the
// level is capped at Capacity − L exactly when Held is at Capacity). So
// a store keeps today's refill arithmetic for Held, and loans change only
// three things: a take or a borrow may use Held − L; a loan's end takes
// its units from Held, at its end (refill to it, then subtract); a return
// takes the spent part.
type Lender struct {
	Held  int64  // units in the bucket or out on loan, at TS
	TS    int64  // µs on the store's clock
	Loans []Loan // out on loan, in any order

	uncapped bool // for the property test's own check: refill ignores L
}

// Loan is one slice out on loan.
type Loan struct {
	ID    uint64
	Units int64 // lent
	End   int64 // µs on the store's clock: the term after the borrow was decided
}

// Lent returns the units out on loan (L).
func (b *Lender) Lent() int64 {
	var l int64
	for _, ln := range b.Loans {
		l += ln.Units
	}
	return l
}

// Level returns the units that may be taken or lent at TS: Held − L.
func (b *Lender) Level() int64 { return b.Held - b.Lent() }

// advance refills b to now (clamped: never back), ending the loans due
// by then in the order they end: refilled to a loan's end, Held loses
// the loan's units.
func (b *Lender) advance(p *Policy, now int64) {
	if now < b.TS {
		now = b.TS
	}
	slices.SortFunc(b.Loans, func(x, y Loan) int { return cmp.Compare(x.End, y.End) })
	for len(b.Loans) > 0 && b.Loans[0].End <= now {
		b.refillTo(p, b.Loans[0].End)
		b.Held -= b.Loans[0].Units
		b.Loans = b.Loans[1:]
	}
	b.refillTo(p, now)
}

// refillTo refills Held from TS to t (≥ TS), as a plain bucket's units;
// the broken model of the property test refills the level to Capacity.
func (b *Lender) refillTo(p *Policy, t int64) {
	if b.uncapped {
		l := b.Lent()
		b.Held = min(p.refill(b.Held-l, b.TS, t), p.Capacity) + l
	} else {
		b.Held = p.refill(b.Held, b.TS, t)
	}
	b.TS = max(b.TS, t)
}

// Take takes n tokens at now when the level holds them, as a plain
// bucket does, and reports whether it did.
func (b *Lender) Take(p *Policy, n int, now int64) bool {
	b.advance(p, now)
	need := int64(n) * p.Unit
	if b.Level() < need {
		return false
	}
	b.Held -= need
	return true
}

// Borrow lends units (a whole slice) for term µs as loan id at now, only
// when the level holds them all; else it lends nothing (the bucket cannot
// spare a slice: the borrower's decisions go to the store one by one). It
// returns the units lent, and the level left.
func (b *Lender) Borrow(p *Policy, id uint64, units, term, now int64) (lent, level int64) {
	b.advance(p, now)
	if units <= 0 || b.Level() < units {
		return 0, b.Level()
	}
	b.Loans = append(b.Loans, Loan{ID: id, Units: units, End: b.TS + term})
	return units, b.Level()
}

// Return ends loan id at now, giving back its unspent units (at most
// those lent): Held loses the spent ones. A loan no longer recorded
// (ended, or returned before) gives nothing. It reports whether the loan
// was out.
func (b *Lender) Return(p *Policy, id uint64, unspent, now int64) bool {
	b.advance(p, now)
	i := slices.IndexFunc(b.Loans, func(l Loan) bool { return l.ID == id })
	if i < 0 {
		return false
	}
	back := min(max(unspent, 0), b.Loans[i].Units)
	b.Held -= b.Loans[i].Units - back
	b.Loans = slices.Delete(b.Loans, i, i+1)
	return true
}

// SliceUnits is the slice of p lent for a term of µs: the whole tokens
// that refill in term (Rate·Borrow/Period), at most the burst, in units;
// 0 when not one token refills in term.
func SliceUnits(p *Policy, term int64) int64 {
	if term <= 0 {
		return 0
	}
	// term/Tick × Refill, in 128 bits, then whole tokens.
	hi, lo := bits.Mul64(uint64(term/p.Tick), uint64(p.Refill))
	if hi != 0 || lo >= uint64(p.Capacity) {
		return p.Capacity
	}
	return int64(lo) / p.Unit * p.Unit
}
