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
