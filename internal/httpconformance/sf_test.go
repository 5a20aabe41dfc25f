package httpconformance_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// max15 is the largest capacity core accepts: RFC 9651 integers have at
// most 15 digits.
var max15 = core.Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 999_999_999_999_999}

// limitSets are the limits of the limiters under test: one, two and three
// decided together. The second limit has the first one's quota, which
// draft-06 must not list twice; max15 makes every number as long as a
// structured-field integer can be.
var limitSets = []struct {
	name  string
	limit core.Limit
	extra []core.NamedLimit
}{
	{"1 limit", core.PerMinute(3), nil},
	{"1 limit of 15 digits", max15, nil},
	{"2 limits, one quota", core.PerSecond(10), []core.NamedLimit{{Name: "minute", Limit: core.PerMinute(10)}}},
	{"3 limits, 15 digits", core.PerSecond(10), []core.NamedLimit{{Name: "minute", Limit: core.PerMinute(10)}, {Name: "max", Limit: max15}}},
}

// sfScenarios are how the limiter decides: by its store, or degraded (the
// store down) under each fail mode.
var sfScenarios = []struct {
	name string
	down bool
	mode core.FailMode
}{
	{"store", false, core.FailOpen},
	{"degraded FailOpen", true, core.FailOpen},
	{"degraded FailClosed", true, core.FailClosed},
	{"degraded FailLocal", true, core.FailLocal},
}

var styles = []nethttp.HeaderStyle{nethttp.HeadersDraft06, nethttp.HeadersDraft11, nethttp.HeadersLegacy, nethttp.HeadersNone}

// TestStructuredFields parses every rate-limit field each adapter sends
// with an RFC 9651 parser (github.com/dunglas/httpsfv), in every header
// style, for one, two and three limits, allowed, refused and degraded,
// and checks what each style's draft asks of the values.
func TestStructuredFields(t *testing.T) {
	t.Parallel()
	responses := map[string]int{}
	for _, ad := range adapters {
		for _, style := range styles {
			for _, set := range limitSets {
				for _, sc := range sfScenarios {
					name := fmt.Sprintf("%s/%s/%s/%s", ad.name, style, set.name, sc.name)
					t.Run(name, func(t *testing.T) {
						e := &env{t: t, clk: limitertest.NewClock()}
						cfg := core.Config{Store: core.NewMemoryStore(core.WithClock(e.clk.Now)), Limit: set.limit, Extra: set.extra, FailMode: sc.mode}
						if sc.down {
							cfg.Store, cfg.Instances = limitertest.NewDownStore(), 1
						}
						h := ad.build(global(e.config(cfg), nethttp.WithHeaders(style)), ad)
						for i, advance := range sfSteps {
							e.clk.Advance(advance)
							w := httptest.NewRecorder()
							h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/users/1", nil))
							checkFields(t, fmt.Sprintf("request %d", i+1), style, sc.down, w)
							responses[fmt.Sprintf("%s %d", http.StatusText(w.Code), w.Code)]++
						}
					})
				}
			}
		}
	}
	t.Logf("%d adapters × %d styles × %d limit sets × %d scenarios × %d requests: %v",
		len(adapters), len(styles), len(limitSets), len(sfScenarios), len(sfSteps), responses)
	for _, want := range []string{"OK 200", "Too Many Requests 429", "Service Unavailable 503"} {
		if responses[want] == 0 {
			t.Errorf("no %s response was checked", want)
		}
	}
}

// sfSteps are the clock moves before each request: twelve at once (every
// set but max15 runs out), a second later (per-second refilled, per-minute
// binding), a minute later.
var sfSteps = []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, time.Second, 0, 59 * time.Second, 0}

// fieldsOf lists, for each style, the fields it sends on every decision
// that is not degraded.
var fieldsOf = map[nethttp.HeaderStyle][]string{
	nethttp.HeadersDraft06: {"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy"},
	nethttp.HeadersDraft11: {"Ratelimit-Policy", "Ratelimit"},
	nethttp.HeadersLegacy:  {"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"},
	nethttp.HeadersNone:    nil,
}

// checkFields checks one response's rate-limit fields and Retry-After.
func checkFields(t *testing.T, where string, style nethttp.HeaderStyle, degraded bool, w *httptest.ResponseRecorder) {
	t.Helper()
	h := w.Header()
	want := fieldsOf[style]
	if degraded {
		want = nil // a degraded decision's numbers would be fiction
	}
	refused := w.Code == http.StatusTooManyRequests || w.Code == http.StatusServiceUnavailable
	if refused {
		want = append(slices.Clone(want), "Retry-After")
	}
	var got []string
	for k, v := range h {
		if isLimitField(k) {
			got = append(got, k)
			if len(v) != 1 {
				t.Errorf("%s: %s sent %d times: %q", where, k, len(v), v)
			}
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("%s (%d): fields %v, want %v", where, w.Code, got, want)
	}
	if refused {
		if ra := sfInt(t, where, h, "Retry-After"); ra < 1 {
			t.Errorf("%s: Retry-After %d, want at least 1", where, ra)
		}
	}
	if len(got) == 0 || degraded {
		return
	}
	switch style {
	case nethttp.HeadersDraft06:
		limit := sfInt(t, where, h, "Ratelimit-Limit")
		sfInt(t, where, h, "Ratelimit-Remaining")
		reset := sfInt(t, where, h, "Ratelimit-Reset")
		if w.Code == http.StatusTooManyRequests && reset != sfInt(t, where, h, "Retry-After") {
			t.Errorf("%s: RateLimit-Reset %d differs from Retry-After on a denial", where, reset)
		}
		var quotas []int64
		for _, m := range sfList(t, where, h, "Ratelimit-Policy") {
			q := itemInt(t, where, "RateLimit-Policy", m)
			win := paramInt(t, where, "RateLimit-Policy", m, "w")
			if q < 1 || win < 1 {
				t.Errorf("%s: RateLimit-Policy item %d;w=%d", where, q, win)
			}
			if slices.Contains(quotas, q) {
				t.Errorf("%s: RateLimit-Policy %q lists quota %d twice, which draft-06 forbids", where, h.Get("Ratelimit-Policy"), q)
			}
			quotas = append(quotas, q)
			onlyParams(t, where, "RateLimit-Policy", m, "w")
		}
		if !slices.Contains(quotas, limit) {
			t.Errorf("%s: RateLimit-Limit %d names no policy of %q", where, limit, h.Get("Ratelimit-Policy"))
		}
	case nethttp.HeadersDraft11:
		var names []string
		for _, m := range sfList(t, where, h, "Ratelimit-Policy") {
			names = append(names, itemString(t, where, "RateLimit-Policy", m))
			if q := paramInt(t, where, "RateLimit-Policy", m, "q"); q < 1 {
				t.Errorf("%s: RateLimit-Policy q=%d", where, q)
			}
			if win := paramInt(t, where, "RateLimit-Policy", m, "w"); win < 1 {
				t.Errorf("%s: RateLimit-Policy w=%d", where, win)
			}
			onlyParams(t, where, "RateLimit-Policy", m, "q", "w")
		}
		for _, m := range sfList(t, where, h, "Ratelimit") {
			if n := itemString(t, where, "RateLimit", m); !slices.Contains(names, n) {
				t.Errorf("%s: RateLimit names %q, a policy not in RateLimit-Policy %v", where, n, names)
			}
			paramInt(t, where, "RateLimit", m, "r")
			paramInt(t, where, "RateLimit", m, "t")
			onlyParams(t, where, "RateLimit", m, "r", "t")
		}
	case nethttp.HeadersLegacy:
		// Not structured fields, but integers a structured-field parser
		// must read as such.
		for _, k := range fieldsOf[style] {
			sfInt(t, where, h, k)
		}
	}
}

// sfInt parses field k as a structured-field Item holding a non-negative
// Integer without parameters.
func sfInt(t *testing.T, where string, h http.Header, k string) int64 {
	t.Helper()
	it, err := httpsfv.UnmarshalItem(h.Values(k))
	if err != nil {
		t.Errorf("%s: %s %q: %v", where, k, h.Values(k), err)
		return -1
	}
	onlyParams(t, where, k, it)
	return itemInt(t, where, k, it)
}

func sfList(t *testing.T, where string, h http.Header, k string) httpsfv.List {
	t.Helper()
	l, err := httpsfv.UnmarshalList(h.Values(k))
	if err != nil || len(l) == 0 {
		t.Errorf("%s: %s %q: %v (%d members)", where, k, h.Values(k), err, len(l))
	}
	return l
}

func itemInt(t *testing.T, where, k string, m httpsfv.Member) int64 {
	t.Helper()
	it, ok := m.(httpsfv.Item)
	n, isInt := it.Value.(int64)
	if !ok || !isInt || n < 0 {
		t.Errorf("%s: %s member %#v is not a non-negative Integer", where, k, m)
	}
	return n
}

func itemString(t *testing.T, where, k string, m httpsfv.Member) string {
	t.Helper()
	it, ok := m.(httpsfv.Item)
	s, isString := it.Value.(string)
	if !ok || !isString || s == "" {
		t.Errorf("%s: %s member %#v is not a String", where, k, m)
	}
	return s
}

func paramInt(t *testing.T, where, k string, m httpsfv.Member, p string) int64 {
	t.Helper()
	it, _ := m.(httpsfv.Item)
	if it.Params == nil {
		t.Errorf("%s: %s member %#v has no parameters", where, k, m)
		return -1
	}
	v, ok := it.Params.Get(p)
	n, isInt := v.(int64)
	if !ok || !isInt || n < 0 {
		t.Errorf("%s: %s parameter %s=%v is not a non-negative Integer", where, k, p, v)
	}
	return n
}

// onlyParams checks that m has exactly the parameters named.
func onlyParams(t *testing.T, where, k string, m httpsfv.Member, names ...string) {
	t.Helper()
	it, _ := m.(httpsfv.Item)
	var got []string
	if it.Params != nil {
		got = it.Params.Names()
	}
	if !slices.Equal(got, names) && !(len(got) == 0 && len(names) == 0) {
		t.Errorf("%s: %s parameters %v, want %s", where, k, got, strings.Join(names, ", "))
	}
}
