package nethttp

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// WithDelay shapes instead of refusing: a request over the limit whose
// tokens will exist within max is booked (core.Limiter.ReserveN, in the
// order requests reach the store, across every instance) and waits its
// exact delay, then goes on to the handler, with header fields that
// describe the bucket after the wait; one that would wait longer is
// refused as without WithDelay (429, Retry-After). A client that goes
// away while it waits cancels its booking (core.Reservation.Cancel): it
// gives back only what no later booking counts on, so on a shared key a
// client that books and hangs up still delays those behind it (see
// docs/waiting.md: key per client). max must be positive and at
// most the MaxWait (core.Config) of every limiter the middleware knows at
// construction (its default and WithRoutes'): construction panics
// otherwise; a limiter from WithLimiterFunc books at most its own
// MaxWait. Default: no request waits. It does not combine with
// WithDryRun or WithAlso (construction panics).
func WithDelay(max time.Duration) Option {
	if max <= 0 {
		panic(fmt.Sprintf("nethttp: WithDelay(%v): the wait must be positive", max))
	}
	return func(c *config) { c.delay = max }
}

// checkDelay panics when WithDelay's wait exceeds the MaxWait of one of
// the limiters the Gate knows (l, and limiters), or comes with WithDryRun
// or WithAlso.
func (c *config) checkDelay(limiters ...*core.Limiter) {
	if c.delay == 0 {
		return
	}
	if c.dryRun {
		panic("nethttp: WithDelay does not combine with WithDryRun: a dry run must not hold requests")
	}
	if c.also != nil {
		panic("nethttp: WithDelay does not combine with WithAlso: a booking holds one key's tokens, not several")
	}
	for _, l := range limiters {
		if most := l.MaxWait(); c.delay > most {
			panic(fmt.Sprintf("nethttp: WithDelay(%v) exceeds the MaxWait (%v) of limiter %q: raise core.Config.MaxWait", c.delay, most, l.Name()))
		}
	}
}

// shape turns denied, a refusal of r's request (c.n tokens of c.key under
// c.lim) that would be served within WithDelay's wait, into a booking and
// waits for it. It returns the Result to send: the booking's, allowed,
// after the wait; or a refusal when the booking could not be made (others
// booked first) or the client went away.
func (g *Gate) shape(ctx context.Context, r *http.Request, c charge, denied core.Result) core.Result {
	// Booked at most WithDelay's wait ahead: ReserveN books only before
	// its context's deadline.
	within, cancel := context.WithTimeout(ctx, g.delay)
	rsv, err := c.lim.ReserveN(within, c.key, c.n)
	cancel()
	if err != nil {
		return denied
	}
	res := rsv.Result()
	if !rsv.OK() || res.Degraded {
		return res
	}
	if d := rsv.Delay(); d > 0 {
		full := time.Now().Add(res.ResetAfter)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			_ = rsv.Cancel(ctx)
			return denied
		}
		res.ResetAfter = max(0, time.Until(full))
	}
	return res
}
