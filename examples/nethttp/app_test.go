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

// The router examples (nethttp, chi, echo, echov5, gin) serve the same
// routes with the same limits, and each answers this same table. The
// limits live in a miniredis of each case's own, whose clock stands
// still, so the cases run in parallel and the Redis script runs as it
// does in production.

// step is one request and what its response must carry.
type step struct {
	method, path string
	times        int // the request is sent this many times (1 when 0), each answered alike
	code         int
	header       map[string]string
}

var cases = []struct {
	name      string
	redisDown bool // miniredis is closed before the first step
	steps     []step
}{
	{
		// The 6th login in a minute is refused, with the headers a client
		// needs; other routes have limits of their own.
		name: "login limit",
		steps: []step{
			{method: "POST", path: "/login", times: 5, code: http.StatusOK},
			{method: "POST", path: "/login", code: http.StatusTooManyRequests, header: map[string]string{
				"RateLimit-Limit":     "5",
				"RateLimit-Remaining": "0",
				"RateLimit-Policy":    "5;w=60",
				"Retry-After":         "12", // a token every 12 s
				"Content-Type":        "application/problem+json",
			}},
			{method: "GET", path: "/api/items/1", code: http.StatusOK, header: map[string]string{"RateLimit-Limit": "1000"}},
		},
	},
	{
		// Item pages share one limit, whatever the id.
		name: "items share a limit",
		steps: []step{
			{method: "GET", path: "/api/items/1", code: http.StatusOK, header: map[string]string{"RateLimit-Remaining": "999"}},
			{method: "GET", path: "/api/items/2", code: http.StatusOK, header: map[string]string{"RateLimit-Remaining": "998"}},
			{method: "GET", path: "/api/items", code: http.StatusOK, header: map[string]string{"RateLimit-Remaining": "997"}},
			{method: "GET", path: "/", code: http.StatusOK, header: map[string]string{"RateLimit-Limit": "60"}},
		},
	},
	{
		// With Redis down, logins are refused (FailClosed) and the rest is
		// served (FailOpen).
		name:      "redis down",
		redisDown: true,
		steps: []step{
			{method: "POST", path: "/login", code: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"}},
			{method: "GET", path: "/api/items", code: http.StatusOK},
		},
	},
}

// TestApp runs every case against the app.
func TestApp(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, m := serve(t)
			if c.redisDown {
				m.Close()
			}
			for _, s := range c.steps {
				for i := range max(s.times, 1) {
					res := do(t, s.method, srv.URL+s.path)
					if res.StatusCode != s.code {
						t.Fatalf("%s %s (#%d): %s, want %d", s.method, s.path, i+1, res.Status, s.code)
					}
					for k, want := range s.header {
						if got := res.Header.Get(k); got != want {
							t.Errorf("%s %s: %s %q, want %q", s.method, s.path, k, got, want)
						}
					}
				}
			}
		})
	}
}

// serve serves the app from an httptest server, its limits kept in a
// miniredis of the test's own whose clock stands still.
func serve(t *testing.T) (*httptest.Server, *miniredis.Miniredis) {
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
