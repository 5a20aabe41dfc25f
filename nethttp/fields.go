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
	slots bool // an in-flight limit's: Set describes the Rate's part (rateOnly)
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

// NewConcurrencyFields returns the Fields of c's acquires: the slots'
// (Max per Lease), or with a Rate (core.ConcurrencyConfig.Rate) the
// Rate's, as Concurrency's responses carry them. It panics as NewFields
// does.
func NewConcurrencyFields(c *core.Concurrency, style HeaderStyle) *Fields {
	f := NewFields(c.Limit(), c.Name(), style)
	if rate := c.Rate(); rate != nil {
		f.ph, f.slots = limiterHeaders(rate), true
	}
	return f
}

// Set sets in h the rate-limit fields of the decision res, with canonical
// keys: none for HeadersNone or a degraded decision (its numbers would be
// fiction). Retry-After is not among them.
func (f *Fields) Set(h http.Header, res core.Result) {
	if res.Degraded {
		return
	}
	f.set(h, res, time.Now)
}

func (f *Fields) set(h http.Header, res core.Result, now func() time.Time) {
	if f.slots {
		res = rateOnly(res)
	}
	setRateLimit(h, f.style, f.ph, &res, now)
}
