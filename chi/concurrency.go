package chi

import (
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Concurrency returns chi middleware that lets at most c's Max requests
// per key run at once, across every instance sharing c's store; refused
// requests get 429 with Retry-After (503 when the store is down and c is
// core.FailClosed). It is nethttp.Concurrency: a chi middleware is a
// net/http one. See nethttp.Concurrency for the options that apply.
func Concurrency(c *core.Concurrency, opts ...Option) func(http.Handler) http.Handler {
	return nethttp.Concurrency(c, opts...)
}
