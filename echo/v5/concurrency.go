package echo

import (
	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Concurrency returns echo middleware that lets at most c's Max requests
// per key run at once, across every instance sharing c's store: a slot is
// taken before the handler and given back when it returns (with or
// without an error), panics or its client goes away, and renewed while it
// runs. Refused requests get 429 with Retry-After (503 when the store is
// down and c is core.FailClosed). See nethttp.Concurrency for the options
// that apply; it panics as that does.
func Concurrency(c *core.Concurrency, opts ...Option) echo.MiddlewareFunc {
	g := nethttp.NewConcurrencyGate(c, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec *echo.Context) error {
			lease, ok := g.Acquire(ec.Response(), ec.Request())
			if !ok {
				return nil
			}
			defer lease.Release(ec.Request().Context())
			return next(ec)
		}
	}
}
