package nethttp

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// Fields sets exactly the rate-limit fields Middleware sends, allowed and
// refused, for one limit and for several, in every style but Legacy (whose
// reset Fields reads from the real clock).
func TestFieldsAreMiddlewares(t *testing.T) {
	t.Parallel()
	for _, style := range []HeaderStyle{HeadersDraft06, HeadersDraft11, HeadersNone} {
		for name, cfg := range map[string]core.Config{
			"one":     {Limit: core.PerMinute(2)},
			"several": {Limit: core.PerSecond(2), Extra: []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(3)}}},
		} {
			clk := limitertest.NewClock()
			cfg.Store, cfg.FailMode = core.NewMemoryStore(core.WithClock(clk.Now)), core.FailOpen
			lim := limitertest.New(t, cfg)
			mw := Middleware(lim, WithHeaders(style))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			f := NewFields(lim.Limit(), lim.Name(), style)
			for i := range 4 {
				w := httptest.NewRecorder()
				mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				want := w.Header().Clone()
				for _, k := range []string{"Retry-After", "Content-Type", "X-Content-Type-Options"} {
					delete(want, k)
				}
				// The same decision again, through Fields: a Peek answers
				// what the request's AllowN did, but for the token it took.
				res, err := lim.Peek(t.Context(), "ip:192.0.2.1", 1)
				if err != nil {
					t.Fatal(err)
				}
				res.Allowed = w.Code == http.StatusOK
				if res.Allowed {
					res.RetryAfter = 0
				}
				got := http.Header{}
				f.Set(got, res)
				if !maps.EqualFunc(got, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
					t.Errorf("%v, %s, request %d (%d): Fields %v, Middleware %v", style, name, i+1, w.Code, got, want)
				}
			}
		}
	}
}

// TestFieldsFormatOnce: for a limiter with several limits, Fields formats
// their values once, as a Gate does, not per decision (issue 36 item 12:
// NewFields ignored Extra, and gRPC reformatted every multi-limit reply).
func TestFieldsFormatOnce(t *testing.T) {
	lim := limitertest.New(t, core.Config{
		Store: core.NewMemoryStore(core.WithClock(limitertest.NewClock().Now)), FailMode: core.FailOpen,
		Limit: core.PerSecond(100), Extra: []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(1000)}},
	})
	res, err := lim.Allow(t.Context(), "k")
	if err != nil || len(res.Policies) != 2 {
		t.Fatalf("%v, %v: want two policies", res, err)
	}
	f := NewFields(lim.Limit(), lim.Name(), HeadersDraft06)
	h := http.Header{}
	f.Set(h, res)
	if got := testing.AllocsPerRun(100, func() { clear(h); f.Set(h, res) }); got > 1 {
		t.Errorf("%v allocations per Set, want at most 1 (the response's own values)", got)
	}
}
