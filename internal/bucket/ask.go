package bucket

import "time"

// Ask is one decision asked of a store: Op for N tokens of Subj (the key
// as the store keeps it) under Policies, filling Each (when not nil) with
// every policy's outcome; by Deadline (zero: none), and admitted only
// while fewer than Bound decisions run in the store (0: no bound). A
// value, so asking allocates nothing.
type Ask struct {
	Op       int // OpTake, OpPeek, OpRefund, or a waiting operation with its argument (WithArg)
	Subj     string
	N        int
	Policies []Policy
	Each     []Outcome
	Deadline time.Time
	Bound    int64
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
// overflow), or a policy New would refuse (ErrInvalidLimit: its numbers must
// stay below 2^53, where the arithmetic is exact and cannot overflow).
func Check(subject string, n int, policies []Policy) error {
	switch {
	case subject == "":
		return ErrEmptyKey
	case n < 1:
		return ErrInvalidCost
	case len(policies) == 0:
		return ErrInvalidConfig
	}
	for i := range policies {
		p := &policies[i]
		if p.Unit <= 0 || p.Refill <= 0 || p.Tick <= 0 || p.Capacity > MaxExact-p.Refill || CeilDiv(p.Capacity, p.Refill) > MaxExact/p.Tick {
			return ErrInvalidLimit
		}
		if int64(n) > p.Capacity/p.Unit {
			return ErrCostTooHigh
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
		return ErrCostTooHigh
	}
	return nil
}
