package bucket

import "time"

// Ask is one decision asked of a store: Op for N tokens of Subj (the key
// as the store keeps it) under Policies, filling Each (when not nil) with
// every policy's outcome; by Deadline (zero: none), and admitted only
// while fewer than Bound decisions run in the store (0: no bound). A
// value, so asking allocates nothing.
//
// With Across, an Ask is one decision across subjects, all or nothing
// (core.AllowAll): policy i's bucket is Across[i].Subj's, and costs
// Across[i].N; Op is OpTake or OpRefund, Subj is Across[0].Subj (it names
// the node and the replay record's slot) and N is not read. No bucket may
// appear twice (the caller merges them), and Each is required.
type Ask struct {
	Op       int // OpTake, OpPeek, OpRefund, or a waiting operation with its argument (WithArg)
	Subj     string
	N        int
	Policies []Policy
	Each     []Outcome
	Deadline time.Time
	Bound    int64
	Across   []Part // nil, or index-aligned with Policies
	Lend     *Lend  // OpLend's loans; nil otherwise
}

// Lend is what an OpLend asks of Subj's buckets under the Ask's
// Policies (see Lender, the model): first loan Return (0: none) ends,
// giving back Back[i] tokens unspent of policy i's slice, if it is still
// out; then loan ID (0: none) borrows Want[i] tokens of every policy i
// for the operation's argument (µs on the store's clock), all or
// nothing, only when every bucket holds them. The outcome is allowed
// when the slice was lent (or, with ID 0, the loan was returned), with
// the tokens left in each bucket besides its loans. Loan ids are unique
// across instances (the caller's to make so); Back and Want are
// index-aligned with Policies.
type Lend struct {
	Return uint64
	Back   []int64
	ID     uint64
	Want   []int64
}

// Part is one bucket's subject and cost in a decision across subjects
// (Ask.Across). A take's part costs N tokens, taken only when every part
// holds its own; N 0 takes nothing and asks for one token (a look), and
// N one above the burst can never pass (the whole is refused, and every
// other part says whether it would have passed). A refund's part gives
// back N ≥ 1, capped at the burst.
type Part struct {
	Subj string // as the store keys it
	N    int
}

// The operations of a decision. The waiting ones (DESIGN §11) take one
// argument besides n, carried in the operation word (see WithArg), so
// that they travel every path a take does — the guard, the batches, the
// fallback — unchanged.
const (
	OpTake    = 1 // n tokens, all or nothing across the policies
	OpPeek    = 2 // as OpTake would answer, taking nothing
	OpRefund  = 3 // n tokens given back, each bucket capped at its capacity
	OpReserve = 4 // n now, or booked when they exist within arg µs (the bucket owes them)
	OpCharge  = 5 // n taken, never refused; the debt bounded by max(C, R·arg µs)
	OpCancel  = 6 // n given back by a reservation due at arg µs on the store's clock, if not yet due
	OpPause   = 7 // the bucket owes at least what refills in arg µs (an upstream's Retry-After)
	OpLend    = 8 // slices of the bucket lent for arg µs and returned (see Lend)
	OpClear   = 9 // the subject's buckets made full again (Limiter.Reset); a store's own, never the arithmetic's
)

// opBits is the width of an operation in its word.
const opBits = 4

// WithArg returns the word of op with its argument x ≥ 0 (below 2^58).
func WithArg(op int, x int64) int { return op | int(x)<<opBits }

// SplitOp returns the operation of word op and its argument.
func SplitOp(op int) (kind int, x int64) { return op & (1<<opBits - 1), int64(op >> opBits) }

// MaxExact bounds every scaled quantity: Lua numbers are doubles, exact up to 2^53.
const MaxExact = 1 << 53

// maxCharge bounds the units a charge or a pause may leave a bucket
// owing, so that the arithmetic stays exact below 2^53.
const maxCharge = 1 << 52

// Check rejects what no store may decide: an empty subject (one bucket
// for everyone, and an empty Cluster hash tag), a cost below 1, a cost
// above a policy's burst (it could never be served, and n × Unit could
// overflow), or a policy New would refuse (InvalidLimit: its numbers must
// stay below 2^53, where the arithmetic is exact and cannot overflow).
func Check(subject string, n int, policies []Policy) error {
	switch {
	case subject == "":
		return EmptyKey
	case n < 1:
		return InvalidCost
	case len(policies) == 0:
		return InvalidConfig
	}
	for i := range policies {
		p := &policies[i]
		if p.Unit <= 0 || p.Refill <= 0 || p.Tick <= 0 || p.Capacity > MaxExact-p.Refill || CeilDiv(p.Capacity, p.Refill) > MaxExact/p.Tick {
			return InvalidLimit
		}
		if int64(n) > p.Capacity/p.Unit {
			return CostTooHigh
		}
	}
	return nil
}

// CheckAcross is Check for a decision across subjects (see Ask.Across
// and Part): as many parts as policies, each with a subject and a cost
// its part allows.
func CheckAcross(op int, parts []Part, policies []Policy, each []Outcome) error {
	if (op != OpTake && op != OpRefund) || len(parts) == 0 || len(parts) != len(policies) || len(each) != len(parts) {
		return InvalidConfig
	}
	for i := range parts {
		if err := Check(parts[i].Subj, 1, policies[i:i+1]); err != nil {
			return err
		}
		p := &policies[i]
		if n := int64(parts[i].N); n < 0 || n > p.Capacity/p.Unit+1 || op == OpRefund && (n < 1 || n > p.Capacity/p.Unit) {
			return InvalidCost
		}
	}
	return nil
}

// CheckOp is Check for op: a charge or a pause may cost more than a
// burst (a charge beyond the debt bound is forgiven; a limiter sends at
// most ChargeCap tokens, and the stores clamp n before they scale it).
func CheckOp(op int, subject string, n int, policies []Policy) error {
	kind, _ := SplitOp(op)
	if kind != OpCharge && kind != OpPause {
		return Check(subject, n, policies)
	}
	if err := Check(subject, 1, policies); err != nil {
		return err
	}
	if int64(n) > MaxExact {
		return CostTooHigh
	}
	return nil
}
