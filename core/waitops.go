package core

import "github.com/sluicehq/ratelimit/internal/bucket"

// admits reports whether op decides an admission (a take, a peek, a
// reservation): FailClosed refuses those while the store cannot decide.
// The others only account for what happened (a refund, a charge, a
// cancel, a pause) and are never refused.
func admits(op int) bool {
	kind, _ := bucket.SplitOp(op)
	return kind == bucket.OpTake || kind == bucket.OpPeek || kind == bucket.OpReserve
}
