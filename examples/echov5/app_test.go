package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// newTestApp serves the app from an httptest server, its limits kept in a
// miniredis of the test's own whose clock stands still.
func newTestApp(t *testing.T) (*httptest.Server, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	// A second for each store decision, not the default 50ms: under -race
	// on a busy machine miniredis can be slower than that, and the
	// FailClosed login limiter would answer 503.
	app, err := newApp(core.Config{Store: core.NewRedisStore(client), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	return srv, m
}

func do(t *testing.T, method, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// The 6th login in a minute is refused, with the headers a client needs.
func TestLoginLimit(t *testing.T) {
	srv, _ := newTestApp(t)
	for i := 1; i <= 5; i++ {
		if res := do(t, "POST", srv.URL+"/login"); res.StatusCode != http.StatusOK {
			t.Fatalf("login %d: %s", i, res.Status)
		}
	}
	res := do(t, "POST", srv.URL+"/login")
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("login 6: %s, want 429", res.Status)
	}
	for k, want := range map[string]string{
		"RateLimit-Limit":     "5",
		"RateLimit-Remaining": "0",
		"RateLimit-Policy":    "5;w=60",
		"Retry-After":         "12", // a token every 12 s
		"Content-Type":        "application/problem+json",
	} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	// Other routes have limits of their own.
	if res := do(t, "GET", srv.URL+"/api/items/1"); res.StatusCode != http.StatusOK || res.Header.Get("RateLimit-Limit") != "1000" {
		t.Errorf("/api/items/1: %s, limit %q", res.Status, res.Header.Get("RateLimit-Limit"))
	}
}

// Item pages share one limit, whatever the id.
func TestItemsShareALimit(t *testing.T) {
	srv, _ := newTestApp(t)
	for i, path := range []string{"/api/items/1", "/api/items/2", "/api/items"} {
		res := do(t, "GET", srv.URL+path)
		if got, want := res.Header.Get("RateLimit-Remaining"), []string{"999", "998", "997"}[i]; got != want {
			t.Errorf("%s: remaining %q, want %q", path, got, want)
		}
	}
	if res := do(t, "GET", srv.URL+"/"); res.Header.Get("RateLimit-Limit") != "60" {
		t.Errorf("/: limit %q, want 60", res.Header.Get("RateLimit-Limit"))
	}
}

// With Redis down, logins are refused (FailClosed) and the rest is served
// (FailOpen).
func TestRedisDown(t *testing.T) {
	srv, m := newTestApp(t)
	m.Close()
	if res := do(t, "POST", srv.URL+"/login"); res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("login: %s, Retry-After %q; want 503 with Retry-After", res.Status, res.Header.Get("Retry-After"))
	}
	if res := do(t, "GET", srv.URL+"/api/items"); res.StatusCode != http.StatusOK {
		t.Errorf("/api/items: %s, want 200", res.Status)
	}
}
