package nethttp

import (
	"net/http"
	"testing"
	"time"
)

// Every spelling of Retry-After is read alike, and a pause is at most a
// day however it is spelt (issue 44: past 2^64 s paused nothing, 2^63 s a
// day).
func TestRetryAfterSpellings(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{" 030 ", 30 * time.Second, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{"Thursday, 01-Jan-26 00:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Thu Jan  1 00:00:30 2026", 30 * time.Second, true},         // asctime
		{"86400", maxPause, true},
		{"86401", maxPause, true},
		{"9223372036854775808", maxPause, true},  // 2^63
		{"18446744073709551616", maxPause, true}, // 2^64
		{"99999999999999999999999999999", maxPause, true},
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxPause, true},
		{"", 0, false},
		{"-5", 0, false},
		{"soon", 0, false},
	} {
		got, ok := retryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// Every spelling of one upstream is one key (issue 44: nine spellings of
// one address got 81 requests through a shared bound of 11).
func TestHostKeySpellings(t *testing.T) {
	for want, spellings := range map[string][]string{
		"127.0.0.1:8080": {"127.0.0.1:8080", "127.0.0.1:08080", "127.0.0.1:0008080", "[::ffff:127.0.0.1]:8080",
			"[::FFFF:7f00:1]:8080", "[0:0:0:0:0:ffff:127.0.0.1]:8080", "[::ffff:7F00:0001]:008080"},
		"127.0.0.1":   {"127.0.0.1", "127.0.0.1:80", "127.0.0.1:0080", "[::ffff:127.0.0.1]", "[::ffff:127.0.0.1]:80"},
		"example.com": {"example.com", "Example.COM", "example.com.", "EXAMPLE.com.:80", "example.com:080"},
		"[::1]:8443":  {"[::1]:8443", "[0:0:0:0:0:0:0:1]:8443", "[0::1]:08443"},
	} {
		for _, s := range spellings {
			if got := hostKey("http", s); got != want {
				t.Errorf("hostKey(http, %q) = %q, want %q", s, got, want)
			}
		}
	}
	if got := hostKey("https", "example.com:443"); got != "example.com" {
		t.Errorf("https's default port: got %q", got)
	}
	if got := hostKey("https", "example.com:80"); got != "example.com:80" {
		t.Errorf("http's port under https: got %q, want it kept", got)
	}
}
