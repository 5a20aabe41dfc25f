package nethttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/ratelimit/core"
)

// downStore is a store that cannot decide.
type downStore struct{}

var errDown = errors.New("redis: connection refused to 10.1.2.3:6379 (internal)")

func (downStore) Take(context.Context, string, int, []core.Policy, []core.Outcome) (core.Outcome, error) {
	return core.Outcome{}, errDown
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

// get serves a GET of target from the client at 192.0.2.1.
func get(h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// rateLimitFields returns the response's rate-limit fields (any style).
func rateLimitFields(h http.Header) []string {
	var got []string
	for k := range h {
		if strings.HasPrefix(k, "Ratelimit") || strings.HasPrefix(k, "X-Ratelimit") {
			got = append(got, k)
		}
	}
	return got
}

// wantHeader checks that h holds exactly want, each key once; a wanted
// value "*" matches any value.
func wantHeader(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || (got[0] != v && v != "*") {
			t.Errorf("%s: got %q, want %q", k, got, v)
		}
	}
	for k := range h {
		if k != http.CanonicalHeaderKey(k) {
			t.Errorf("header key %q is not canonical", k)
		}
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected header %s: %q", k, h[k])
		}
	}
}
