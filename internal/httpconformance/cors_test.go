package httpconformance_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// TestPreflightNeverCounted: a CORS preflight (OPTIONS with
// Access-Control-Request-Method) is neither counted nor refused, in every
// adapter, so a browser's real request gets the 429 and its fields
// (issue 25).
func TestPreflightNeverCounted(t *testing.T) {
	t.Parallel()
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			t.Parallel()
			lim := mustLimiter(t, core.NewMemoryStore(), "cors")
			h := ad.build(app{global: &mw{lim: lim}}, ad)
			for range 10 {
				r := httptest.NewRequest(http.MethodOptions, "/login", nil)
				r.Header.Set("Origin", "https://app.example")
				r.Header.Set("Access-Control-Request-Method", "GET")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code == http.StatusTooManyRequests || w.Header().Get("RateLimit-Limit") != "" {
					t.Fatalf("preflight: %d %v: refused or decided", w.Code, w.Header())
				}
			}
			for i := range 3 { // the limit of 3 is untouched
				if got := get(h, "/login"); got != http.StatusOK {
					t.Fatalf("request %d after 10 preflights: %d, want 200", i+1, got)
				}
			}
		})
	}
}

func TestExposedHeaders(t *testing.T) {
	t.Parallel()
	for style, want := range map[nethttp.HeaderStyle]int{
		nethttp.HeadersDraft06: 5, nethttp.HeadersDraft11: 3, nethttp.HeadersLegacy: 4, nethttp.HeadersNone: 1,
	} {
		lim := mustLimiter(t, core.NewMemoryStore(), "exposed")
		h := nethttp.Middleware(lim, nethttp.WithHeaders(style))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		sent := map[string]bool{}
		for range 4 { // allowed, then refused: Retry-After too
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			for k := range w.Header() {
				if k != "Content-Type" && k != "X-Content-Type-Options" {
					sent[k] = true
				}
			}
		}
		got := nethttp.ExposedHeaders(style)
		if len(got) != want || len(got) != len(sent) {
			t.Errorf("%v: ExposedHeaders %v, responses sent %v", style, got, sent)
		}
		for _, k := range got {
			if !sent[http.CanonicalHeaderKey(k)] {
				t.Errorf("%v: ExposedHeaders lists %s, never sent", style, k)
			}
		}
	}
}

func get(h http.Handler, target string) int {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "203.0.113.7:4000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}
