package nethttp

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// HeaderStyle selects the rate-limit fields a response carries. Whatever the
// style, a 429 or 503 response also carries Retry-After, and a degraded
// decision (core.Result.Degraded) carries no rate-limit fields: its numbers
// would be fiction.
//
// For a limiter with several limits (core.Config.Extra), the fields
// describe the binding limit (core.Result's Limit, Name, Remaining), and
// RateLimit-Policy lists every limit in configuration order, e.g.
// "2;w=1, 5;w=3600", or with HeadersDraft11
// `"2-per-1s";q=2;w=1, "hourly";q=5;w=3600`; draft-11's RateLimit field
// then has an item per limit: `"2-per-1s";r=1;t=1, "hourly";r=4;t=720`.
type HeaderStyle int

const (
	// HeadersDraft06 sends the RateLimit-* fields of the IETF draft up to
	// draft-06; the default. For core.PerMinute(3) after one request:
	//
	//	RateLimit-Limit: 3
	//	RateLimit-Remaining: 2
	//	RateLimit-Reset: 20
	//	RateLimit-Policy: 3;w=60
	//
	// Limit is the bucket capacity, Remaining the whole tokens left, Reset the
	// seconds (rounded up) until the bucket is full again, or on a denial the
	// same value as Retry-After; w is core.Limit.Window in seconds.
	HeadersDraft06 HeaderStyle = iota
	// HeadersDraft11 sends the structured fields of IETF draft-11, labelled
	// with the policy name (core.Limiter.Name):
	//
	//	RateLimit-Policy: "3-per-1m0s";q=3;w=60
	//	RateLimit: "3-per-1m0s";r=2;t=20
	HeadersDraft11
	// HeadersLegacy sends the X-RateLimit-* fields many clients know, the
	// reset as Unix epoch seconds (rounded up) of the instant HeadersDraft06's
	// Reset points to:
	//
	//	X-RateLimit-Limit: 3
	//	X-RateLimit-Remaining: 2
	//	X-RateLimit-Reset: 1767225620
	HeadersLegacy
	// HeadersNone sends no rate-limit fields; only Retry-After on 429 and 503.
	HeadersNone
)

// String returns "draft06", "draft11", "legacy", "none" or "HeaderStyle(n)".
func (s HeaderStyle) String() string {
	switch s {
	case HeadersDraft06:
		return "draft06"
	case HeadersDraft11:
		return "draft11"
	case HeadersLegacy:
		return "legacy"
	case HeadersNone:
		return "none"
	}
	return "HeaderStyle(" + strconv.Itoa(int(s)) + ")"
}

// Header keys in canonical form (http.CanonicalHeaderKey), so they can be
// assigned to the header map directly, as Header.Set would store them.
const (
	keyLimit      = "Ratelimit-Limit"
	keyRemaining  = "Ratelimit-Remaining"
	keyReset      = "Ratelimit-Reset"
	keyPolicy     = "Ratelimit-Policy"
	keyRateLimit  = "Ratelimit"
	keyXLimit     = "X-Ratelimit-Limit"
	keyXRemaining = "X-Ratelimit-Remaining"
	keyXReset     = "X-Ratelimit-Reset"
	keyRetryAfter = "Retry-After"
)

// policyHeaders holds a limiter's constant header values, formatted once.
// The slices are shared by every response, with len == cap so that a later
// Header.Add copies instead of writing into them.
type policyHeaders struct {
	limit    core.Limit
	name     string
	capacity []string // "3"
	policy06 []string // "3;w=60"
	policy11 []string // `"3-per-1m0s";q=3;w=60`
	item11   string   // `"3-per-1m0s";r=`, the start of a RateLimit item

	// multi holds the values for a limiter with several limits
	// (core.Config.Extra), built from its first result.
	multi atomic.Pointer[multiHeaders]
}

func newPolicyHeaders(lim core.Limit, name string) *policyHeaders {
	c := int64(lim.Capacity())
	w := int64(lim.Window() / time.Second)
	p06 := strconv.AppendInt(nil, c, 10)
	p06 = append(p06, ";w="...)
	p06 = strconv.AppendInt(p06, w, 10)
	sf := appendSFString(nil, name)
	p11 := append([]byte(nil), sf...)
	p11 = append(p11, ";q="...)
	p11 = strconv.AppendInt(p11, c, 10)
	p11 = append(p11, ";w="...)
	p11 = strconv.AppendInt(p11, w, 10)
	return &policyHeaders{
		limit:    lim,
		name:     name,
		capacity: one(strconv.FormatInt(c, 10)),
		policy06: one(string(p06)),
		policy11: one(string(p11)),
		item11:   string(sf) + ";r=",
	}
}

func (ph *policyHeaders) matches(name string, lim core.Limit) bool {
	return ph != nil && ph.name == name && ph.limit == lim
}

// multiHeaders holds the values for several limits decided together:
// RateLimit-Policy lists them all, in configuration order.
type multiHeaders struct {
	each     []*policyHeaders
	policy06 []string // "2;w=1, 5;w=3600"
	policy11 []string // `"2-per-1s";q=2;w=1, "hourly";q=5;w=3600`
}

func newMultiHeaders(ps []core.PolicyResult) *multiHeaders {
	m := &multiHeaders{each: make([]*policyHeaders, len(ps))}
	p06 := make([]string, len(ps))
	p11 := make([]string, len(ps))
	for i, p := range ps {
		m.each[i] = newPolicyHeaders(p.Limit, p.Name)
		p06[i], p11[i] = m.each[i].policy06[0], m.each[i].policy11[0]
	}
	m.policy06 = one(strings.Join(p06, ", "))
	m.policy11 = one(strings.Join(p11, ", "))
	return m
}

func (m *multiHeaders) matches(ps []core.PolicyResult) bool {
	if m == nil || len(m.each) != len(ps) {
		return false
	}
	for i := range ps {
		if !m.each[i].matches(ps[i].Name, ps[i].Limit) {
			return false
		}
	}
	return true
}

func one(s string) []string { return []string{s}[:1:1] }

// setRateLimit sets style's rate-limit fields for a decision that is not
// degraded. ph holds the values precomputed for the limiter that decided
// (nil when there are none); values res does not match are formatted here.
// now is read only by HeadersLegacy.
//
// Remaining and reset are the binding limit's (res's own fields); with
// several limits, RateLimit-Policy lists them all and draft-11's RateLimit
// has an item for each.
func setRateLimit(h http.Header, style HeaderStyle, ph *policyHeaders, res *core.Result, now func() time.Time) {
	if style == HeadersNone {
		return
	}
	var m *multiHeaders
	binding := ph
	if len(res.Policies) > 1 {
		m = ph.multiFor(res.Policies)
		binding = nil
		for _, e := range m.each {
			if e.name == res.Name {
				binding = e
				break
			}
		}
	}
	if !binding.matches(res.Name, res.Limit) {
		binding = newPolicyHeaders(res.Limit, res.Name)
	}
	remaining := max(int64(res.Remaining), 0)
	switch style {
	case HeadersDraft06:
		h[keyLimit] = binding.capacity
		h[keyRemaining] = intValue(remaining)
		h[keyReset] = intValue(resetSeconds(res))
		if m != nil {
			h[keyPolicy] = m.policy06
		} else {
			h[keyPolicy] = binding.policy06
		}
	case HeadersDraft11:
		var buf [192]byte
		b := buf[:0]
		if m != nil {
			h[keyPolicy] = m.policy11
			for i, p := range res.Policies {
				if i > 0 {
					b = append(b, ", "...)
				}
				t := ceilSeconds(p.ResetAfter)
				if !res.Allowed && p.RetryAfter > 0 {
					t = retrySeconds(p.RetryAfter)
				}
				b = appendItem11(b, m.each[i].item11, int64(p.Remaining), t)
			}
		} else {
			h[keyPolicy] = binding.policy11
			b = appendItem11(b, binding.item11, remaining, resetSeconds(res))
		}
		h[keyRateLimit] = one(string(b))
	case HeadersLegacy:
		h[keyXLimit] = binding.capacity
		h[keyXRemaining] = intValue(remaining)
		h[keyXReset] = intValue(resetEpoch(now(), res))
	}
}

// multiFor returns the values for ps, kept in ph after the first time.
func (ph *policyHeaders) multiFor(ps []core.PolicyResult) *multiHeaders {
	if ph != nil {
		if m := ph.multi.Load(); m.matches(ps) {
			return m
		}
	}
	m := newMultiHeaders(ps)
	if ph != nil {
		ph.multi.CompareAndSwap(nil, m)
	}
	return m
}

// appendItem11 appends one draft-11 RateLimit item: `"name";r=2;t=20`.
func appendItem11(b []byte, item string, remaining, reset int64) []byte {
	b = append(b, item...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, reset, 10)
}

// setRetryAfter sets Retry-After for a 429 or 503 response.
func setRetryAfter(h http.Header, res *core.Result) {
	h[keyRetryAfter] = intValue(retrySeconds(res.RetryAfter))
}

// retrySeconds is Retry-After: whole seconds, rounded up, at least 1, so a
// client never retries at once into the same denial.
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// resetSeconds is RateLimit-Reset: until the bucket is full when allowed;
// on a denial, the same value as Retry-After.
func resetSeconds(res *core.Result) int64 {
	if res.Allowed {
		return ceilSeconds(res.ResetAfter)
	}
	return retrySeconds(res.RetryAfter)
}

// resetEpoch is X-RateLimit-Reset: the Unix second, rounded up, at which
// the bucket is full (allowed) or the request could succeed (denied, at
// least a second away, as Retry-After).
func resetEpoch(now time.Time, res *core.Result) int64 {
	d := max(res.ResetAfter, 0)
	if !res.Allowed {
		d = max(res.RetryAfter, time.Second)
	}
	t := now.Add(d)
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// appendSFString appends s as a Structured Field string (RFC 9651): quoted,
// with '"' and '\' escaped. Bytes a string cannot hold (controls, non-ASCII)
// become '?'; core.Config.Name admits none, but a header must never carry
// CR or LF whatever the name.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// smallInts is the number of header values precomputed: enough for the
// remaining tokens and reset seconds of most limits (an hour is 3600 s).
const smallInts = 4096

// intTable holds "0" … "4095", each as a one-element slice of one shared
// array, so a header value for a small integer costs no allocation.
var intTable = sync.OnceValue(func() []string {
	t := make([]string, smallInts)
	var digits []byte
	ends := make([]int, smallInts)
	for i := range t {
		digits = strconv.AppendInt(digits, int64(i), 10)
		ends[i] = len(digits)
	}
	all, start := string(digits), 0
	for i := range t {
		t[i] = all[start:ends[i]]
		start = ends[i]
	}
	return t
})

// intValue returns n as a header value, without allocating for small n.
func intValue(n int64) []string {
	if n >= 0 && n < smallInts {
		return intTable()[n : n+1 : n+1]
	}
	return one(strconv.FormatInt(n, 10))
}
