package core

// The store operations of waiting and debt (DESIGN §11), beside opTake,
// opPeek and opRefund. Each takes one argument besides n, carried in the
// operation word (see withArg), so that they travel every path a take
// does — the guard, the batches, the fallback — unchanged.
const (
	opReserve = 4 // n now, or booked when they exist within arg µs (the bucket owes them)
	opCharge  = 5 // n taken, never refused; the debt bounded by max(C, R·arg µs)
	opCancel  = 6 // n given back by a reservation due at arg µs on the store's clock, if not yet due
	opPause   = 7 // the bucket owes at least what refills in arg µs (an upstream's Retry-After)
)

// opBits is the width of an operation in its word.
const opBits = 4

// withArg returns the word of op with its argument x ≥ 0 (below 2^58).
func withArg(op int, x int64) int { return op | int(x)<<opBits }

// splitOp returns the operation of word op and its argument.
func splitOp(op int) (kind int, x int64) { return op & (1<<opBits - 1), int64(op >> opBits) }

// admits reports whether op decides an admission (a take, a peek, a
// reservation): FailClosed refuses those while the store cannot decide.
// The others only account for what happened (a refund, a charge, a
// cancel, a pause) and are never refused.
func admits(op int) bool {
	kind, _ := splitOp(op)
	return kind == opTake || kind == opPeek || kind == opReserve
}

// maxCharge bounds a charge's cost: n × Unit stays below 2^52 under every
// policy, so the arithmetic stays exact (a charge beyond the debt bound is
// forgiven anyway).
const maxCharge = 1 << 52

// checkOp is checkTake for op: a charge or a pause may cost more than a
// burst (a charge beyond the debt bound is forgiven).
func checkOp(op int, subject string, n int, policies []Policy) error {
	kind, _ := splitOp(op)
	if kind != opCharge && kind != opPause {
		return checkTake(subject, n, policies)
	}
	if err := checkTake(subject, 1, policies); err != nil {
		return err
	}
	for i := range policies {
		if int64(n) > maxCharge/policies[i].Unit {
			return ErrCostTooHigh
		}
	}
	return nil
}
