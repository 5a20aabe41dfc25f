package nethttp

import (
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Fields formats the rate-limit header fields of one limiter's decisions
// for transports other than net/http (package grpc sends them as response
// metadata): the fields and values Middleware's responses carry, from
// values formatted once, as a Gate's are. Build it once per limiter; it is
// safe for concurrent use.
type Fields struct {
	style HeaderStyle
	ph    *policyHeaders
}

// NewFields returns the Fields of the decisions of a limiter whose limit
// and policy name are lim and name: a core.Limiter's or a
// core.Concurrency's Limit() and Name(). It panics if style is not one of
// the constants.
func NewFields(lim core.Limit, name string, style HeaderStyle) *Fields {
	if style < HeadersDraft06 || style > HeadersNone {
		panic("nethttp: NewFields: unknown " + style.String())
	}
	return &Fields{style: style, ph: newPolicyHeaders(lim, name)}
}

// Set sets in h the rate-limit fields of the decision res, with canonical
// keys: none for HeadersNone or a degraded decision (its numbers would be
// fiction). Retry-After is not among them.
func (f *Fields) Set(h http.Header, res core.Result) {
	if res.Degraded {
		return
	}
	setRateLimit(h, f.style, f.ph, &res, time.Now)
}
