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
