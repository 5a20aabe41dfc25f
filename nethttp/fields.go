package nethttp

import (
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// SetFields sets in h the rate-limit fields that style gives the decision
// res, with the values Middleware's responses carry: none for HeadersNone
// or a degraded decision (its numbers would be fiction). Retry-After is not
// among them. It is for transports other than net/http: package grpc sends
// these fields as response metadata. Keys are canonical
// (http.CanonicalHeaderKey).
func SetFields(h http.Header, style HeaderStyle, res core.Result) {
	if res.Degraded {
		return
	}
	setRateLimit(h, style, nil, &res, time.Now)
}
