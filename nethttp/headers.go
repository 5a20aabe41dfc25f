package nethttp

import (
	"math"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
// Likewise for the limiters WithAlso decides with the middleware's.
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

// ExposedHeaders returns the names of the response header fields style
// sends that a browser's JavaScript may read only when the CORS
// configuration lists them in Access-Control-Expose-Headers: Retry-After
// and the style's rate-limit fields. Give them to the CORS middleware,
// which must run before the limiter (see the README, "Browsers"):
//
//	cors.Handler(cors.Options{ExposedHeaders: ratelimit.ExposedHeaders(ratelimit.HeadersDraft06), …})
func ExposedHeaders(style HeaderStyle) []string {
	switch style {
	case HeadersDraft06:
		return []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "Retry-After"}
	case HeadersDraft11:
		return []string{"RateLimit", "RateLimit-Policy", "Retry-After"}
	case HeadersLegacy:
		return []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}
	}
	return []string{"Retry-After"}
}

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
// They are strings, which no response can change; every response gets
// slices of its own (see setRateLimit).
type policyHeaders struct {
	limit    core.Limit
	name     string
	capacity string // "3"
	policy06 string // "3;w=60"
	policy11 string // `"3-per-1m0s";q=3;w=60`
	item11   string // `"3-per-1m0s";r=`, the start of a RateLimit item

	// multi holds the values for a limiter with several limits
	// (core.Config.Extra); nil for one.
	multi *multiHeaders
}

// limiterHeaders formats the header values of l's configured limits.
func limiterHeaders(l *core.Limiter) *policyHeaders {
	ls := l.Limits()
	ph := newPolicyHeaders(ls[0].Limit, ls[0].Name)
	if len(ls) > 1 {
		ps := make([]core.PolicyResult, len(ls))
		for i, nl := range ls {
			ps[i] = core.PolicyResult{Name: nl.Name, Limit: nl.Limit}
		}
		ph.multi = newMultiHeaders(ps)
	}
	return ph
}

func newPolicyHeaders(lim core.Limit, name string) *policyHeaders {
	c := sfInt(int64(lim.Capacity()))
	w := windowSeconds(lim)
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
		capacity: strconv.FormatInt(c, 10),
		policy06: string(p06),
		policy11: string(p11),
		item11:   string(sf) + ";r=",
	}
}

// maxSFInt is the largest integer an RFC 9651 structured field can hold
// (15 digits). core.New refuses capacities above it; the values derived
// from a capacity (remaining tokens, seconds) are clamped to it too, so a
// field is never one a parser rejects.
const maxSFInt = 999_999_999_999_999

// sfInt clamps n to what a structured-field integer holds, at least 0.
func sfInt(n int64) int64 { return min(max(n, 0), maxSFInt) }

// windowSeconds is the w parameter: core.Limit.Window in seconds, worked
// out without time.Duration when a huge window (a tiny rate, a large
// burst: centuries) would overflow it.
func windowSeconds(lim core.Limit) int64 {
	c, rate, period := lim.Capacity(), lim.Rate, lim.Period
	if rate <= 0 || period <= 0 || c <= 0 {
		return 0
	}
	// c·period/rate in ns, compared with the largest Duration in floating
	// point, which is exact enough to tell "fits" from "overflows".
	if float64(c)*float64(period)/float64(rate) < float64(math.MaxInt64/2) {
		return sfInt(int64(lim.Window() / time.Second))
	}
	ns := new(big.Int).Mul(big.NewInt(int64(c)), big.NewInt(int64(period)))
	den := new(big.Int).Mul(big.NewInt(int64(rate)), big.NewInt(int64(time.Second)))
	s, rem := new(big.Int).QuoRem(ns, den, new(big.Int))
	if rem.Sign() > 0 {
		s.Add(s, big.NewInt(1))
	}
	if !s.IsInt64() {
		return maxSFInt
	}
	return sfInt(s.Int64())
}

func (ph *policyHeaders) matches(name string, lim core.Limit) bool {
	return ph != nil && ph.name == name && ph.limit == lim
}

// multiHeaders holds the values for several limits decided together:
// RateLimit-Policy lists them, in configuration order.
type multiHeaders struct {
	each []*policyHeaders
	// policy06 is draft-06's RateLimit-Policy for each binding limit
	// ("2;w=1, 5;w=3600"). The draft forbids two policies with the same
	// quota (RateLimit-Limit names a policy by its quota), so of limits
	// with equal capacities only one is listed: the binding one when it is
	// among them, else the first.
	policy06 []string
	policy11 string // `"2-per-1s";q=2;w=1, "hourly";q=5;w=3600`
}

func newMultiHeaders(ps []core.PolicyResult) *multiHeaders {
	m := &multiHeaders{each: make([]*policyHeaders, len(ps)), policy06: make([]string, len(ps))}
	p11 := make([]string, len(ps))
	for i, p := range ps {
		m.each[i] = newPolicyHeaders(p.Limit, p.Name)
		p11[i] = m.each[i].policy11
	}
	m.policy11 = strings.Join(p11, ", ")
	for binding := range ps {
		var p06 []string
		for i, e := range m.each {
			if m.listed06(i, binding) {
				p06 = append(p06, e.policy06)
			}
		}
		m.policy06[binding] = strings.Join(p06, ", ")
	}
	return m
}

// listed06 reports whether limit i is in draft-06's RateLimit-Policy when
// limit binding is the binding one.
func (m *multiHeaders) listed06(i, binding int) bool {
	if i == binding {
		return true
	}
	c := m.each[i].capacity
	if m.each[binding].capacity == c {
		return false // the binding limit has this quota
	}
	for j := range i {
		if m.each[j].capacity == c {
			return false // an earlier limit has it
		}
	}
	return true
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

// setRateLimit sets style's rate-limit fields for a decision that is not
// degraded. ph holds the values precomputed for the limiter that decided
// (nil when there are none); values res does not match are formatted here.
// now is read only by HeadersLegacy.
//
// Remaining and reset are the binding limit's (res's own fields); with
// several limits, RateLimit-Policy lists them and draft-11's RateLimit has
// an item for each.
//
// The values of one response share one array of their own, allocated
// here: a handler that edits w.Header()["RateLimit-Limit"][0] in place
// changes that response only.
func setRateLimit(h http.Header, style HeaderStyle, ph *policyHeaders, res *core.Result, now func() time.Time) {
	if style == HeadersNone {
		return
	}
	var m *multiHeaders
	binding, bindingAt := ph, 0
	if len(res.Policies) > 1 {
		m = ph.multiFor(res.Policies)
		binding = nil
		for i, e := range m.each {
			if e.matches(res.Name, res.Limit) {
				binding, bindingAt = e, i
				break
			}
		}
	}
	if !binding.matches(res.Name, res.Limit) {
		binding = newPolicyHeaders(res.Limit, res.Name)
		m = nil // res's limit is none of the listed ones: list it alone
	}
	remaining := sfInt(int64(res.Remaining))
	switch style {
	case HeadersDraft06:
		v := new([4]string)
		v[0], v[1], v[2], v[3] = binding.capacity, intString(remaining), intString(resetSeconds(res)), binding.policy06
		if m != nil {
			v[3] = m.policy06[bindingAt]
		}
		h[keyLimit], h[keyRemaining], h[keyReset], h[keyPolicy] = v[0:1:1], v[1:2:2], v[2:3:3], v[3:4:4]
	case HeadersDraft11:
		var buf [192]byte
		b := buf[:0]
		v := new([2]string)
		if m != nil {
			v[0] = m.policy11
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
			v[0] = binding.policy11
			b = appendItem11(b, binding.item11, remaining, resetSeconds(res))
		}
		v[1] = string(b)
		h[keyPolicy], h[keyRateLimit] = v[0:1:1], v[1:2:2]
	case HeadersLegacy:
		v := new([3]string)
		v[0], v[1], v[2] = binding.capacity, intString(remaining), intString(resetEpoch(now(), res))
		h[keyXLimit], h[keyXRemaining], h[keyXReset] = v[0:1:1], v[1:2:2], v[2:3:3]
	}
}

// multiFor returns the values for ps: ph's, formatted at construction,
// or else (limits other than the limiter's configured ones, as
// core.Limiter.AllowLimit decides under) formatted for this response.
func (ph *policyHeaders) multiFor(ps []core.PolicyResult) *multiHeaders {
	if ph != nil && ph.multi.matches(ps) {
		return ph.multi
	}
	return newMultiHeaders(ps)
}

// appendItem11 appends one draft-11 RateLimit item: `"name";r=2;t=20`.
func appendItem11(b []byte, item string, remaining, reset int64) []byte {
	b = append(b, item...)
	b = strconv.AppendInt(b, sfInt(remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, sfInt(reset), 10)
}

// setRetryAfter sets Retry-After for a 429 or 503 response.
func setRetryAfter(h http.Header, res *core.Result) {
	h[keyRetryAfter] = []string{intString(retrySeconds(res.RetryAfter))}
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

// intTable holds "0" … "4095", substrings of one shared string, so a
// header value for a small integer costs no allocation.
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

// intString returns n in decimal, without allocating for small n.
func intString(n int64) string {
	if n >= 0 && n < smallInts {
		return intTable()[n]
	}
	return strconv.FormatInt(n, 10)
}
