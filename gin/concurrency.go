package gin

import (
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Concurrency returns gin middleware that lets at most c's Max requests
// per key run at once, across every instance sharing c's store: a slot is
// taken before the rest of the chain (c.Next) and given back when it
// returns, panics or its client goes away, and renewed while it runs.
// Refused requests get 429 with Retry-After (503 when the store is down
// and c is core.FailClosed), and the chain is aborted. See
// nethttp.Concurrency for the options that apply; it panics as that does.
func Concurrency(c *core.Concurrency, opts ...Option) gin.HandlerFunc {
	g := nethttp.NewConcurrencyGate(c, opts...)
	return func(gc *gin.Context) {
		lease, ok := g.Acquire(gc.Writer, gc.Request)
		if !ok {
			gc.Abort()
			return
		}
		defer lease.Release(gc.Request.Context())
		gc.Next()
	}
}
