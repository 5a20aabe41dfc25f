package nethttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

const (
	textPlain = "text/plain; charset=utf-8"
	problem   = "application/problem+json"
)

// step is one request in a golden sequence: move the clock, send, check.
type step struct {
	advance time.Duration
	status  int
	header  map[string]string // exact: no other fields
}

// runSteps sends the steps through Middleware(limiter of lim, opts...).
func runSteps(t *testing.T, lim core.Limit, opts []Option, steps []step) {
	t.Helper()
	clk := limitertest.NewClock()
	opts = append([]Option{WithClock(clk.Now)}, opts...)
	sendSteps(t, Middleware(limitertest.NewLimiterClock(t, lim, clk.Now), opts...)(okHandler), clk, steps)
}

// sendSteps sends the steps to h, moving clk.
func sendSteps(t *testing.T, h http.Handler, clk *limitertest.Clock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Advance(s.advance)
		w := limitertest.Get(h, "/")
		if w.Code != s.status {
			t.Fatalf("request %d: status %d, want %d", i+1, w.Code, s.status)
		}
		t.Logf("request %d at +%v: %v", i+1, clk.Now().Sub(limitertest.Epoch), w.Header())
		wantHeader(t, w.Header(), s.header)
	}
}

func allowed(kv ...string) step { return step{status: 200, header: fields(textPlain, kv)} }
func denied(kv ...string) step  { return step{status: 429, header: fields(problem, kv)} }

func fields(contentType string, kv []string) map[string]string {
	m := map[string]string{"Content-Type": contentType}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	if contentType == problem {
		m["X-Content-Type-Options"] = "nosniff"
	}
	return m
}

func after(d time.Duration, s step) step { s.advance = d; return s }

// TestHeadersGolden works through PerMinute(3) by hand: capacity 3, one
// token every 20 s, window 60 s. After one request 2 tokens are left and the
// bucket is full again in 20 s; the 4th request at the same instant lacks
// one token, 20 s away.
func TestHeadersGolden(t *testing.T) {
	t.Parallel()
	const resetAt1 = "1767225620" // limitertest.Epoch + 20 s
	tests := []struct {
		name  string
		lim   core.Limit
		opts  []Option
		steps []step
	}{{
		name: "draft06",
		lim:  core.PerMinute(3),
		steps: []step{
			allowed("Ratelimit-Limit", "3", "Ratelimit-Remaining", "2", "Ratelimit-Reset", "20", "Ratelimit-Policy", "3;w=60"),
			allowed("Ratelimit-Limit", "3", "Ratelimit-Remaining", "1", "Ratelimit-Reset", "40", "Ratelimit-Policy", "3;w=60"),
			allowed("Ratelimit-Limit", "3", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "60", "Ratelimit-Policy", "3;w=60"),
			denied("Ratelimit-Limit", "3", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "20", "Ratelimit-Policy", "3;w=60", "Retry-After", "20"),
			// 7 s later: 0.35 tokens, one is 13 s away.
			after(7*time.Second, denied("Ratelimit-Limit", "3", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "13", "Ratelimit-Policy", "3;w=60", "Retry-After", "13")),
			// 13 s later: exactly one token, taken; empty again, full in 60 s.
			after(13*time.Second, allowed("Ratelimit-Limit", "3", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "60", "Ratelimit-Policy", "3;w=60")),
		},
	}, {
		name: "draft06 explicit",
		lim:  core.PerMinute(3),
		opts: []Option{WithHeaders(HeadersDraft06)},
		steps: []step{
			allowed("Ratelimit-Limit", "3", "Ratelimit-Remaining", "2", "Ratelimit-Reset", "20", "Ratelimit-Policy", "3;w=60"),
		},
	}, {
		// 7 per minute: a token every 60/7 = 8.571428… s, rounded up to 9.
		name: "draft06 rounding up",
		lim:  core.PerMinute(7),
		steps: []step{
			allowed("Ratelimit-Limit", "7", "Ratelimit-Remaining", "6", "Ratelimit-Reset", "9", "Ratelimit-Policy", "7;w=60"),
		},
	}, {
		// 60 per minute, burst 10: a token a second, full in 10 s.
		name: "draft06 burst",
		lim:  core.PerMinute(60).WithBurst(10),
		steps: []step{
			allowed("Ratelimit-Limit", "10", "Ratelimit-Remaining", "9", "Ratelimit-Reset", "1", "Ratelimit-Policy", "10;w=10"),
		},
	}, {
		// Half a token a second: a denial 2 s away; 1.5 s later, 0.5 s away,
		// which Retry-After rounds up to 1.
		name: "draft06 sub-second retry",
		lim:  core.Limit{Rate: 1, Period: 2 * time.Second, Burst: 1},
		steps: []step{
			allowed("Ratelimit-Limit", "1", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "2", "Ratelimit-Policy", "1;w=2"),
			after(1500*time.Millisecond, denied("Ratelimit-Limit", "1", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "1", "Ratelimit-Policy", "1;w=2", "Retry-After", "1")),
		},
	}, {
		name: "draft11",
		lim:  core.PerMinute(3),
		opts: []Option{WithHeaders(HeadersDraft11)},
		steps: []step{
			allowed("Ratelimit-Policy", `"3-per-1m0s";q=3;w=60`, "Ratelimit", `"3-per-1m0s";r=2;t=20`),
			allowed("Ratelimit-Policy", `"3-per-1m0s";q=3;w=60`, "Ratelimit", `"3-per-1m0s";r=1;t=40`),
			allowed("Ratelimit-Policy", `"3-per-1m0s";q=3;w=60`, "Ratelimit", `"3-per-1m0s";r=0;t=60`),
			denied("Ratelimit-Policy", `"3-per-1m0s";q=3;w=60`, "Ratelimit", `"3-per-1m0s";r=0;t=20`, "Retry-After", "20"),
		},
	}, {
		name: "legacy",
		lim:  core.PerMinute(3),
		opts: []Option{WithHeaders(HeadersLegacy)},
		steps: []step{
			allowed("X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", "2", "X-Ratelimit-Reset", resetAt1),
			allowed("X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", "1", "X-Ratelimit-Reset", "1767225640"),
			allowed("X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1767225660"),
			denied("X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetAt1, "Retry-After", "20"),
			// At +7 s a token is 13 s away: still limitertest.Epoch + 20.
			after(7*time.Second, denied("X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetAt1, "Retry-After", "13")),
		},
	}, {
		// Full again at limitertest.Epoch + 8.571428 s: rounded up to the next second.
		name: "legacy rounding up",
		lim:  core.PerMinute(7),
		opts: []Option{WithHeaders(HeadersLegacy)},
		steps: []step{
			allowed("X-Ratelimit-Limit", "7", "X-Ratelimit-Remaining", "6", "X-Ratelimit-Reset", "1767225609"),
		},
	}, {
		name: "none",
		lim:  core.PerMinute(3),
		opts: []Option{WithHeaders(HeadersNone)},
		steps: []step{
			allowed(), allowed(), allowed(),
			denied("Retry-After", "20"),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, tt.lim, tt.opts, tt.steps)
		})
	}
}

// TestHeadersMultiLimit works through 2 per second (window 1 s) and 5 per
// hour named "hourly" (a token every 720 s, window 3600 s), decided together.
// The fields describe the binding limit: the one with the fewest tokens left
// when allowed, the denying one when refused; RateLimit-Policy lists both.
func TestHeadersMultiLimit(t *testing.T) {
	t.Parallel()
	const (
		p06 = "2;w=1, 5;w=3600"
		p11 = `"2-per-1s";q=2;w=1, "hourly";q=5;w=3600`
	)
	steps06 := []step{
		allowed("Ratelimit-Limit", "2", "Ratelimit-Remaining", "1", "Ratelimit-Reset", "1", "Ratelimit-Policy", p06),
		allowed("Ratelimit-Limit", "2", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "1", "Ratelimit-Policy", p06),
		// The per-second limit lacks a token for 0.5 s.
		denied("Ratelimit-Limit", "2", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "1", "Ratelimit-Policy", p06, "Retry-After", "1"),
		// +1 s: hourly holds 3 + 1/720 tokens; per-second is binding with 1.
		after(time.Second, allowed("Ratelimit-Limit", "2", "Ratelimit-Remaining", "1", "Ratelimit-Reset", "1", "Ratelimit-Policy", p06)),
		allowed("Ratelimit-Limit", "2", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "1", "Ratelimit-Policy", p06),
		// +2 s: hourly is left with 2/720 of a token: binding, full in
		// (5 - 2/720) × 720 s = 3598 s.
		after(time.Second, allowed("Ratelimit-Limit", "5", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "3598", "Ratelimit-Policy", p06)),
		// hourly lacks 718/720 of a token: 718 s.
		denied("Ratelimit-Limit", "5", "Ratelimit-Remaining", "0", "Ratelimit-Reset", "718", "Ratelimit-Policy", p06, "Retry-After", "718"),
	}
	steps11 := []step{
		allowed("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=1;t=1, "hourly";r=4;t=720`),
		allowed("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=0;t=1, "hourly";r=3;t=1440`),
		denied("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=0;t=1, "hourly";r=3;t=1440`, "Retry-After", "1"),
		after(time.Second, allowed("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=1;t=1, "hourly";r=2;t=2159`)),
		allowed("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=0;t=1, "hourly";r=1;t=2879`),
		after(time.Second, allowed("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=1;t=1, "hourly";r=0;t=3598`)),
		denied("Ratelimit-Policy", p11, "Ratelimit", `"2-per-1s";r=1;t=1, "hourly";r=0;t=718`, "Retry-After", "718"),
	}
	for name, c := range map[string]struct {
		style HeaderStyle
		steps []step
	}{"draft06": {HeadersDraft06, steps06}, "draft11": {HeadersDraft11, steps11}} {
		t.Run(name, func(t *testing.T) {
			clk := limitertest.NewClock()
			l := limitertest.New(t, core.Config{
				Store:    core.NewMemoryStore(core.WithClock(clk.Now)),
				Limit:    core.PerSecond(2),
				Extra:    []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(5)}},
				FailMode: core.FailOpen,
			})
			sendSteps(t, Middleware(l, WithHeaders(c.style))(okHandler), clk, c.steps)
		})
	}
}

// TestHeadersCustomName checks a Config.Name reaches draft-11 fields.
func TestHeadersCustomName(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	l := limitertest.New(t, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(clk.Now)),
		Limit:    core.PerSecond(10),
		FailMode: core.FailOpen,
		Name:     "api.free",
	})
	w := limitertest.Get(Middleware(l, WithHeaders(HeadersDraft11))(okHandler), "/")
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type":     textPlain,
		"Ratelimit-Policy": `"api.free";q=10;w=1`,
		"Ratelimit":        `"api.free";r=9;t=1`,
	})
}

func TestAppendSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"3-per-1m0s": `"3-per-1m0s"`,
		`a"b\c`:      `"a\"b\\c"`,
		"x\r\ny\x7f": `"x??y?"`,
		"é":          `"??"`,
		"":           `""`,
	} {
		if got := string(appendSFString(nil, in)); got != want {
			t.Errorf("appendSFString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestIntString(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 1, 9, 10, 59, 60, 3600, smallInts - 1, smallInts, 1767225620, -1} {
		if got := intString(n); got != strconv.FormatInt(n, 10) {
			t.Errorf("intString(%d) = %q", n, got)
		}
	}
}

// TestHeadersNotShared: a handler that edits a rate-limit value in place
// (w.Header()[k][0] = …) changes its own response only (issue 14).
func TestHeadersNotShared(t *testing.T) {
	t.Parallel()
	for style := HeadersDraft06; style < HeadersNone; style++ {
		t.Run(style.String(), func(t *testing.T) {
			clk := limitertest.NewClock()
			l := limitertest.New(t, core.Config{Store: core.NewMemoryStore(core.WithClock(clk.Now)), Limit: core.PerSecond(1000), FailMode: core.FailOpen})
			vandal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range w.Header() {
					for i := range v {
						v[i] = "edited"
					}
					w.Header()[k] = append(v, "added")
				}
			})
			h := Middleware(l, WithHeaders(style), WithKey(func(*http.Request) (string, error) { return "k", nil }))(vandal)
			want := limitertest.Get(Middleware(l, WithHeaders(style), WithKey(func(*http.Request) (string, error) { return "other", nil }))(okHandler), "/").Header()
			for range 3 {
				limitertest.Get(h, "/")
			}
			deny := Middleware(limitertest.NewLimiter(t, core.PerMinute(1)), WithHeaders(style))(okHandler)
			limitertest.Get(deny, "/")
			limitertest.Get(deny, "/").Header()["Content-Type"][0] = "edited"
			for range 2 {
				clk.Advance(time.Hour)
				got := limitertest.Get(Middleware(l, WithHeaders(style), WithKey(func(*http.Request) (string, error) { return "other", nil }))(okHandler), "/").Header()
				for k, v := range got {
					if strings.Contains(strings.Join(v, ","), "edited") || len(v) != 1 {
						t.Errorf("%s: %q after another response was edited", k, v)
					}
				}
				if len(got) != len(want) {
					t.Errorf("fields %v, want %v", got, want)
				}
				if w := limitertest.Get(deny, "/"); w.Header().Get("Content-Type") != problem {
					t.Errorf("Content-Type %q, want %q", w.Header().Get("Content-Type"), problem)
				}
			}
		})
	}
}

// TestHeadersDraft06SameQuota: draft-06 forbids two policies with the same
// quota in RateLimit-Policy, so of PerSecond(10) and PerMinute(10) only
// the binding one is listed; a third, distinct quota is always listed.
func TestHeadersDraft06SameQuota(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	l := limitertest.New(t, core.Config{
		Store:    core.NewMemoryStore(core.WithClock(clk.Now)),
		Limit:    core.PerSecond(10),
		Extra:    []core.NamedLimit{{Name: "minute", Limit: core.PerMinute(10)}, {Name: "day", Limit: core.PerDay(1000)}},
		FailMode: core.FailOpen,
	})
	h := Middleware(l)(okHandler)
	// The first request: every limit has 9 left; the first, per second, binds.
	w := limitertest.Get(h, "/")
	wantHeader(t, w.Header(), map[string]string{"Content-Type": textPlain,
		"Ratelimit-Limit": "10", "Ratelimit-Remaining": "9", "Ratelimit-Reset": "1", "Ratelimit-Policy": "10;w=1, 1000;w=86400"})
	// A second later the per-second bucket is full again: per minute binds.
	clk.Advance(time.Second)
	w = limitertest.Get(h, "/")
	wantHeader(t, w.Header(), map[string]string{"Content-Type": textPlain,
		"Ratelimit-Limit": "10", "Ratelimit-Remaining": "8", "Ratelimit-Reset": "11", "Ratelimit-Policy": "10;w=60, 1000;w=86400"})
}

func TestListed06(t *testing.T) {
	t.Parallel()
	m := newMultiHeaders([]core.PolicyResult{
		{Name: "a", Limit: core.PerSecond(10)}, {Name: "b", Limit: core.PerMinute(10)},
		{Name: "c", Limit: core.PerHour(10)}, {Name: "d", Limit: core.PerDay(5)},
	})
	for binding, want := range []string{"10;w=1, 5;w=86400", "10;w=60, 5;w=86400", "10;w=3600, 5;w=86400", "10;w=1, 5;w=86400"} {
		if got := m.policy06[binding]; got != want {
			t.Errorf("binding %d: %q, want %q", binding, got, want)
		}
	}
}

// TestWindowSeconds: w stays a valid structured-field integer for windows
// a time.Duration cannot hold.
func TestWindowSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lim  core.Limit
		want int64
	}{
		{core.PerMinute(3), 60},
		{core.Limit{Rate: 10, Period: time.Second, Burst: 2}, 1},
		{core.PerDay(1).WithBurst(1_000_000), 86_400_000_000},
		{core.Limit{Rate: 1, Period: 30 * 24 * time.Hour, Burst: 999_999_999_999_999}, maxSFInt},
		{core.Limit{Rate: 3, Period: 24 * time.Hour, Burst: 1 << 30}, 30_923_764_531_200},
	} {
		if got := windowSeconds(c.lim); got != c.want {
			t.Errorf("windowSeconds(%v) = %d, want %d", c.lim, got, c.want)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d           time.Duration
		ceil, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{1, 1, 1},
		{time.Second, 1, 1},
		{time.Second + 1, 2, 2},
		{20 * time.Second, 20, 20},
		{1<<63 - 1, 9223372037, 9223372037},
	} {
		if got := ceilSeconds(c.d); got != c.ceil {
			t.Errorf("ceilSeconds(%v) = %d, want %d", c.d, got, c.ceil)
		}
		if got := retrySeconds(c.d); got != c.retry {
			t.Errorf("retrySeconds(%v) = %d, want %d", c.d, got, c.retry)
		}
	}
}

func TestHeaderStyleString(t *testing.T) {
	t.Parallel()
	for s, want := range map[HeaderStyle]string{
		HeadersDraft06: "draft06", HeadersDraft11: "draft11", HeadersLegacy: "legacy", HeadersNone: "none", 9: "HeaderStyle(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
}

// FuzzHeaders formats arbitrary results in every style and checks that
// values are safe to send: no control characters, integers where integers
// belong, Retry-After at least 1, and a problem body that is valid JSON.
func FuzzHeaders(f *testing.F) {
	f.Add(true, 2, int64(0), int64(20e9), 3, int64(60e6), 3, "3-per-1m0s", int64(0))
	f.Add(false, 0, int64(20e9), int64(60e9), 3, int64(60e6), 0, `a"b\c`, int64(1500))
	f.Add(false, -5, int64(-1), int64(-1), 1, int64(1), 1<<30, "x\r\ny", int64(-1))
	f.Fuzz(func(t *testing.T, allowedRes bool, remaining int, retry, reset int64, rate int, periodUS int64, burst int, name string, nowNS int64) {
		lim := core.Limit{Rate: max(1, rate%1_000_000), Period: time.Duration(max(1, periodUS%3_600_000_000)) * time.Microsecond, Burst: max(0, burst%1_000_000)}
		res := core.Result{
			Allowed: allowedRes, Limit: lim, Name: name, Remaining: remaining,
			RetryAfter: time.Duration(retry), ResetAfter: time.Duration(reset),
		}
		if burst%3 == 0 {
			// Two limits: the binding one and an hourly one.
			hourly := core.PerHour(max(1, remaining%10_000))
			res.Policies = []core.PolicyResult{
				{Name: name, Limit: lim, Remaining: remaining, RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter},
				{Name: "hourly", Limit: hourly, Remaining: remaining / 2, RetryAfter: time.Duration(reset / 3), ResetAfter: time.Duration(retry * 7)},
			}
		}
		now := time.Unix(0, nowNS)
		ph := newPolicyHeaders(lim, name)
		if nowNS%2 == 0 {
			ph = nil // formatted from res
		}
		for style := HeadersDraft06; style <= HeadersNone; style++ {
			h := http.Header{}
			setRateLimit(h, style, ph, &res, func() time.Time { return now })
			setRetryAfter(h, &res)
			for k, vs := range h {
				if len(vs) != 1 {
					t.Fatalf("%v %s: %d values", style, k, len(vs))
				}
				for i := 0; i < len(vs[0]); i++ {
					if c := vs[0][i]; c < 0x20 || c >= 0x7f {
						t.Fatalf("%v %s: %q holds byte %#x", style, k, vs[0], c)
					}
				}
			}
			for _, k := range []string{keyLimit, keyRemaining, keyReset, keyXLimit, keyXRemaining, keyXReset, keyRetryAfter} {
				if v := h.Get(k); v != "" {
					if n, err := strconv.ParseInt(v, 10, 64); err != nil || (n < 0 && k != keyXReset) {
						t.Fatalf("%v %s: %q is not a non-negative integer", style, k, v)
					}
				}
			}
			if ra, _ := strconv.ParseInt(h.Get(keyRetryAfter), 10, 64); ra < 1 {
				t.Fatalf("Retry-After %q < 1", h.Get(keyRetryAfter))
			}
			if style == HeadersDraft06 && !allowedRes && h.Get(keyReset) != h.Get(keyRetryAfter) {
				t.Fatalf("denied: Reset %q != Retry-After %q", h.Get(keyReset), h.Get(keyRetryAfter))
			}
		}
		for _, degraded := range []bool{false, true} {
			res.Degraded = degraded
			w := &discardWriter{h: http.Header{}}
			DefaultDenyHandler(w, nil, res)
			var doc struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(w.body, &doc); err != nil || doc.Status != w.status {
				t.Fatalf("body %s: %v (status %d)", w.body, err, w.status)
			}
		}
	})
}
