package nethttp

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

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
