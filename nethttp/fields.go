package nethttp

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Fields formats the rate-limit header fields of one limiter's decisions
// for transports other than net/http (package grpc sends them as response
// metadata): the fields and values Middleware's responses carry. Values
// that depend only on the limit are formatted once: at construction, and
// for a limiter with several limits (core.Config.Extra) at the first
// decision that lists them. Build it once per limiter; it is safe for
// concurrent use.
type Fields struct {
	style HeaderStyle
	ph    atomic.Pointer[policyHeaders]

	// An in-flight limit's: its slots' values (Max per Lease), and whether
	// ph is its Rate's (core.ConcurrencyConfig.Rate); nil for a rate
	// limit's Fields.
	slots *slotHeaders
	rate  bool
}

// slotHeaders are the values of an in-flight limit's slots. Their
// RateLimit-Policy never reads as a rate: draft-06 has none (its w would
// say "Max per Lease"), draft-11 gives the quota unit instead of a window.
type slotHeaders struct {
	*policyHeaders
	policy11 string // `"exports";q=2;qu="concurrent-requests"`
}

// slotRetry is the Retry-After of a refusal by slots: a slot frees when
// one of its holders finishes, which nothing predicts; the earliest lease
// end (core.Result.RetryAfter) is only an upper bound, a Lease away for a
// holder that keeps renewing. So a client is told to try again in a
// second, the least Retry-After says, and never later than that bound.
const slotRetry = time.Second

// NewFields returns the Fields of the decisions of a limiter whose limit
// and policy name are lim and name: a core.Limiter's Limit() and Name().
// It panics if style is not one of the constants.
func NewFields(lim core.Limit, name string, style HeaderStyle) *Fields {
	if style < HeadersDraft06 || style > HeadersNone {
		panic("nethttp: NewFields: unknown " + style.String())
	}
	f := &Fields{style: style}
	f.ph.Store(newPolicyHeaders(lim, name))
	return f
}

// NewConcurrencyFields returns the Fields of c's acquires, as
// Concurrency's responses carry them: the slots' (RateLimit-Limit is Max,
// RateLimit-Remaining the slots free, and no RateLimit-Policy that reads
// as a rate), or with a Rate (core.ConcurrencyConfig.Rate) the Rate's,
// but for a refusal by the slots alone, which describes the slots. It
// panics as NewFields does.
func NewConcurrencyFields(c *core.Concurrency, style HeaderStyle) *Fields {
	f := NewFields(c.Limit(), c.Name(), style)
	ph := f.ph.Load()
	p11 := appendSFString(nil, c.Name())
	p11 = append(p11, ";q="...)
	p11 = append(p11, ph.capacity...)
	p11 = append(p11, `;qu="concurrent-requests"`...)
	f.slots = &slotHeaders{policyHeaders: ph, policy11: string(p11)}
	if rate := c.Rate(); rate != nil {
		f.ph.Store(limiterHeaders(rate))
		f.rate = true
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

// Refusal returns what a refusal res says, and whether it was refused for
// slots rather than a rate: the result whose RetryAfter goes in
// Retry-After (or RetryInfo) and whose fields Set sends. For a rate
// limit's Fields it is res itself. For an in-flight limit's, a refusal by
// the slots alone is the slots' part of res with RetryAfter at most a
// second (a slot frees when a holder finishes, any time before the
// earliest lease ends); a refusal with a Rate whose tokens lacked is the
// Rate's part, with the Rate's wait. FailClosed's blanket refusal
// (res.Degraded without res.Fallback) is res.
func (f *Fields) Refusal(res core.Result) (core.Result, bool) {
	if f.slots == nil || res.Allowed || res.Degraded && !res.Fallback {
		return res, false
	}
	n := len(res.Policies) - 1
	if !f.rate || n < 1 {
		if res.Name != f.slots.name {
			return res, false // a degraded Rate's refusal
		}
		res.RetryAfter = min(res.RetryAfter, slotRetry)
		return res, true
	}
	for _, p := range res.Policies[:n] {
		if p.RetryAfter > 0 {
			return rateOnly(res), false
		}
	}
	s := res.Policies[n]
	return core.Result{Limit: s.Limit, Name: s.Name, Remaining: s.Remaining,
		RetryAfter: min(s.RetryAfter, slotRetry), ResetAfter: s.ResetAfter}, true
}

func (f *Fields) set(h http.Header, res core.Result, now func() time.Time) {
	if f.style == HeadersNone {
		return
	}
	if f.slots != nil {
		slots := !f.rate
		switch {
		case !res.Allowed:
			res, slots = f.Refusal(res)
		case f.rate:
			res = rateOnly(res)
		}
		if slots {
			f.setSlots(h, &res, now)
			return
		}
	}
	ph := f.ph.Load()
	if len(res.Policies) > 1 && !ph.multi.matches(res.Policies) {
		// Several limits not formatted yet: format them once.
		cp := *ph
		cp.multi = newMultiHeaders(res.Policies)
		ph = &cp
		f.ph.Store(ph)
	}
	setRateLimit(h, f.style, ph, &res, now)
}

// setSlots sets the fields of an in-flight limit's slots: those of a
// limit of Max, with draft-11's RateLimit-Policy giving the quota unit
// and draft-06's left out.
func (f *Fields) setSlots(h http.Header, res *core.Result, now func() time.Time) {
	setRateLimit(h, f.style, f.slots.policyHeaders, res, now)
	switch f.style {
	case HeadersDraft06:
		delete(h, keyPolicy)
	case HeadersDraft11:
		if v := h[keyPolicy]; len(v) == 1 && f.slots.matches(res.Name, res.Limit) {
			v[0] = f.slots.policy11 // this response's own slice, just made
		} else {
			h[keyPolicy] = []string{slotPolicy11(res)}
		}
	}
}

// slotPolicy11 is draft-11's RateLimit-Policy of slots other than the
// configured ones (FailLocal's share, Max / Instances).
func slotPolicy11(res *core.Result) string {
	b := appendSFString(nil, res.Name)
	b = append(b, ";q="...)
	b = append(b, intString(sfInt(int64(res.Limit.Capacity())))...)
	return string(append(b, `;qu="concurrent-requests"`...))
}
