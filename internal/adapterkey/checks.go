package adapterkey

import (
	"fmt"

	"github.com/sluicehq/ratelimit/core"
)

// Checks fills the checks of one core.AllowAll for a request of cost n:
// the first is the adapter's own (lim, for key), and every check costs n.
// A cost that one of them could never allow is AllowN's error for it
// (core.ErrInvalidCost, core.ErrCostTooHigh): AllowAll would refuse such
// a check as over its limit, where WithCost's bug is an adapter's error
// (net/http's ErrorHandler, gRPC's codes.Internal), whatever the check.
func Checks(checks []core.Check, lim *core.Limiter, key string, n int) error {
	checks[0] = core.Check{Limiter: lim, Key: key}
	for i := range checks {
		if n != 1 { // 1 is within every burst
			if err := costError(checks[i].Limiter, n); err != nil {
				return err
			}
		}
		checks[i].N = n
	}
	return nil
}

// costError is AllowN's error for a cost n that lim could never allow,
// or nil.
func costError(lim *core.Limiter, n int) error {
	if n < 1 {
		return fmt.Errorf("%w (got %d)", core.ErrInvalidCost, n)
	}
	for _, nl := range lim.Limits() {
		if c := nl.Limit.Capacity(); n > c {
			return fmt.Errorf("%w (cost %d, burst %d of %q)", core.ErrCostTooHigh, n, c, nl.Name)
		}
	}
	return nil
}
