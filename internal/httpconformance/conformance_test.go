package httpconformance_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gingonic "github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/nethttp"
)

func TestMain(m *testing.M) {
	gingonic.SetMode(gingonic.ReleaseMode) // no debug route listing on stdout
	os.Exit(m.Run())
}

// routerHeaders are header fields a router may add of its own accord,
// left out of the comparison between adapters. None is needed today:
// every adapter writes through the router's writer, and the routers add
// nothing to a response the middleware or the handler writes.
var routerHeaders = []string{}

// unixIn is a wanted X-RateLimit-Reset: the Unix time d seconds from
// when the response is checked (HeadersLegacy reads the real clock; the
// value is nethttp's own, checked exactly in its tests).
func unixIn(d int) string { return "now+" + strconv.Itoa(d) }

// sameUnix reports whether got is the Unix time of want (see unixIn), or
// of ref, within a second: the clock may tick between two responses.
func sameUnix(got []string, want string) bool {
	if len(got) != 1 {
		return false
	}
	g, err := strconv.ParseInt(got[0], 10, 64)
	if err != nil {
		return false
	}
	w, err := strconv.ParseInt(want, 10, 64)
	if d, ok := strings.CutPrefix(want, "now+"); ok {
		w, err = strconv.ParseInt(d, 10, 64)
		w += time.Now().Unix()
	}
	return err == nil && g >= w-1 && g <= w+1
}

// env is what one run of a case (one adapter) builds its app from: a fresh
// clock and fresh stores, so every adapter starts from the same state.
type env struct {
	t   *testing.T
	clk *limitertest.Clock
	mem core.Store // shared: see shared
}

// limiter returns a limiter of lim on a memory store reading the clock.
func (e *env) limiter(lim core.Limit) *core.Limiter {
	return e.config(core.Config{Store: core.NewMemoryStore(core.WithClock(e.clk.Now)), Limit: lim, FailMode: core.FailOpen})
}

// down returns a limiter of lim on a store that always fails.
func (e *env) down(lim core.Limit, mode core.FailMode) *core.Limiter {
	return e.config(core.Config{Store: limitertest.NewDownStore(), Limit: lim, FailMode: mode, Instances: 1})
}

func (e *env) config(cfg core.Config) *core.Limiter {
	e.t.Helper()
	return limitertest.New(e.t, cfg)
}

// step is one request and what its response must be.
type step struct {
	path    string            // GET path; default "/users/1"
	header  []string          // request header name, value pairs
	remote  string            // RemoteAddr; default "192.0.2.1:1234"
	advance time.Duration     // moves the clock before the request
	status  int               // wanted status
	want    map[string]string // wanted fields; "*" any value, "" absent
	body    string            // wanted body, when not ""
	// notFound marks a request no route matches: the body and the other
	// fields are each router's 404, so only the status and the rate-limit
	// fields are compared.
	notFound bool
}

// A case is an app and the requests sent to it, in order.
type tcase struct {
	name  string
	app   func(e *env) app
	steps []step
}

// Problem documents nethttp writes.
const (
	problem400       = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing or invalid rate-limit key"}`
	problem400NoKey  = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: header X-Api-Key is required"}`
	problem400TwoKey = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"invalid rate-limit key: header X-Api-Key was sent more than once"}`
	problem400Addr   = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: the client address is not an IP address"}`
	problem400User   = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: no user identified"}`
	problem500       = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit could not be applied"}`
)

func problem429(secs string) string {
	return `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in ` + secs + `"}`
}

func problem503(secs string) string {
	return `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiting is unavailable; retry in ` + secs + `"}`
}

// d06 is the set of draft-06 fields, plus Retry-After when retry is not "".
func d06(limit, remaining, reset, policy, retry string) map[string]string {
	return map[string]string{
		"Ratelimit-Limit":     limit,
		"Ratelimit-Remaining": remaining,
		"Ratelimit-Reset":     reset,
		"Ratelimit-Policy":    policy,
		"Retry-After":         retry,
	}
}

// noFields wants no rate-limit field and no Retry-After.
var noFields = d06("", "", "", "", "")

// with returns m with more wanted fields.
func with(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[http.CanonicalHeaderKey(kv[i])] = kv[i+1]
	}
	return out
}

// global is an app with one middleware around the whole router.
func global(lim *core.Limiter, opts ...nethttp.Option) app {
	return app{global: &mw{lim: lim, opts: opts}}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// ref holds the reference (first adapter's) responses.
			var ref []*httptest.ResponseRecorder
			for _, ad := range adapters {
				e := &env{t: t, clk: limitertest.NewClock()}
				h := ad.build(c.app(e), ad)
				for i, s := range c.steps {
					e.clk.Advance(s.advance)
					w := serve(h, s)
					where := ad.name + " step " + strconv.Itoa(i+1) + " " + path(s)
					check(t, where, s, w)
					if ref == nil || len(ref) <= i {
						ref = append(ref, w)
						continue
					}
					same(t, where, adapters[0].name, s, ref[i], w)
				}
			}
		})
	}
}

func path(s step) string {
	if s.path == "" {
		return "/users/1"
	}
	return s.path
}

func serve(h http.Handler, s step) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path(s), nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if s.remote != "" {
		r.RemoteAddr = s.remote
	}
	for i := 0; i+1 < len(s.header); i += 2 {
		r.Header.Add(s.header[i], s.header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// isLimitField reports whether a field is one the middleware sets for the
// decision: the rate-limit fields of any style and Retry-After.
func isLimitField(k string) bool {
	return strings.HasPrefix(k, "Ratelimit") || strings.HasPrefix(k, "X-Ratelimit") || k == "Retry-After"
}

// check compares a response with the step's wants.
func check(t *testing.T, where string, s step, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != s.status {
		t.Errorf("%s: status %d, want %d (body %q)", where, w.Code, s.status, w.Body)
	}
	if s.body != "" && !s.notFound && w.Body.String() != s.body {
		t.Errorf("%s: body %q, want %q", where, w.Body, s.body)
	}
	h := w.Header()
	for k, v := range s.want {
		got := h.Values(k)
		switch {
		case v == "" && len(got) != 0:
			t.Errorf("%s: %s: %q, want none", where, k, got)
		case strings.HasPrefix(v, "now+"):
			if !sameUnix(got, v) {
				t.Errorf("%s: %s: %q, want %s", where, k, got, v)
			}
		case v == "*" && len(got) != 1, v != "" && v != "*" && !slices.Equal(got, []string{v}):
			t.Errorf("%s: %s: %q, want %q", where, k, got, v)
		}
	}
	for k := range h {
		if _, ok := s.want[k]; isLimitField(k) && !ok {
			t.Errorf("%s: unexpected field %s: %q", where, k, h[k])
		}
	}
}

// same checks that w, from another adapter, equals ref byte for byte:
// status, every header field but the routers' own, and the body.
func same(t *testing.T, where, refName string, s step, ref, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != ref.Code {
		t.Errorf("%s: status %d, %s sent %d", where, w.Code, refName, ref.Code)
	}
	compared := func(k string) bool {
		return !slices.Contains(routerHeaders, k) && (!s.notFound || isLimitField(k))
	}
	for k, v := range ref.Header() {
		if k == "X-Ratelimit-Reset" && len(v) == 1 && sameUnix(w.Header()[k], v[0]) {
			continue
		}
		if compared(k) && !slices.Equal(w.Header()[k], v) {
			t.Errorf("%s: %s: %q, %s sent %q", where, k, w.Header()[k], refName, v)
		}
	}
	for k, v := range w.Header() {
		if _, ok := ref.Header()[k]; compared(k) && !ok {
			t.Errorf("%s: %s: %q, %s sent none", where, k, v, refName)
		}
	}
	if !s.notFound && w.Body.String() != ref.Body.String() {
		t.Errorf("%s: body %q, %s sent %q", where, w.Body, refName, ref.Body)
	}
}

// TestCaseCount guards the suite itself: every adapter of the module is
// in it, under a name of its own, and every case has a unique name and at
// least one request (a case without steps would pass without checking).
func TestCaseCount(t *testing.T) {
	t.Parallel()
	want := []string{"nethttp", "chi", "echo", "echov5", "gin"}
	got := map[string]bool{}
	for _, a := range adapters {
		got[a.name] = true
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("adapter %q is not in the suite", name)
		}
	}
	if len(adapters) != len(want) || len(got) != len(want) {
		t.Errorf("%d adapters (%d names); want %d, one per adapter package", len(adapters), len(got), len(want))
	}
	steps, names := 0, map[string]bool{}
	for _, c := range cases {
		if c.name == "" || names[c.name] {
			t.Errorf("case %q: names must be unique and non-empty", c.name)
		}
		names[c.name] = true
		if len(c.steps) == 0 {
			t.Errorf("case %q has no requests", c.name)
		}
		steps += len(c.steps)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	t.Logf("%d cases (%d requests) × %d adapters", len(cases), steps, len(adapters))
}
