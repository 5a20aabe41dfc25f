package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// newTestApp serves the app against the Redis at REDIS_ADDR, under a key
// prefix of the test's own (skipped when nothing answers there), or a
// miniredis of the test's own when REDIS_ADDR is not set.
func newTestApp(t *testing.T) http.Handler {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	prefix := "example-" + strconv.FormatUint(rand.Uint64(), 36) + ":"
	onRedis := addr != ""
	if !onRedis {
		addr = miniredis.RunT(t).Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	if onRedis {
		reachable(t, c, addr)
	}
	t.Cleanup(func() { // the test's keys, deleted
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	store := core.NewRedisStore(c, core.WithPrefix(prefix))
	// As main does: the script loaded, a connection open, before the
	// first request (a loaded CI machine can take the first EVAL past
	// the 50 ms Timeout, and FailClosed would answer 503).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	// A second for each decision, not the default 50 ms: the property
	// tested is the counting, and a loaded -race run can take a decision
	// past 50 ms, which FailClosed would answer with 503.
	app, err := newApp(store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// reachable skips t, or fails it under RATELIMIT_REQUIRE_REDIS=1, when
// nothing answers at addr.
func reachable(t *testing.T, c *redis.Client, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" {
			t.Fatalf("RATELIMIT_REQUIRE_REDIS=1 but no Redis at REDIS_ADDR=%s: %v", addr, err)
		}
		t.Skipf("no Redis at REDIS_ADDR=%s (%v): start one, or unset REDIS_ADDR; RATELIMIT_REQUIRE_REDIS=1 makes this fail", addr, err)
	}
}

func login(app http.Handler, user, password, addr string) int {
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{"username":"`+user+`","password":"`+password+`"}`))
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	app.ServeHTTP(w, r)
	return w.Code
}

// TestFailuresLockTheUsername: 5 failures lock alice out, even with the
// right password, while a success in between costs nothing and bob is not
// affected.
func TestFailuresLockTheUsername(t *testing.T) {
	app := newTestApp(t)
	steps := []struct {
		user, password string
		want           int
	}{
		{"alice", "wrong", 401}, {"alice", "wrong", 401},
		{"alice", "right", 200},                                                   // costs nothing
		{"alice", "wrong", 401}, {"alice", "wrong", 401}, {"alice", "wrong", 401}, // the fifth failure
		{"alice", "wrong", 429}, {"alice", "right", 429}, // locked for the hour
		{"bob", "right", 200},
	}
	for i, s := range steps {
		if got := login(app, s.user, s.password, "203.0.113.7:4000"); got != s.want {
			t.Fatalf("step %d (%s, %s): %d, want %d", i+1, s.user, s.password, got, s.want)
		}
		t.Logf("%s/%s → %d", s.user, s.password, s.want)
	}
}

// TestSuccessesNeverLockOut: a user logging in again and again is never
// refused by their own successful logins.
func TestSuccessesNeverLockOut(t *testing.T) {
	app := newTestApp(t)
	for i := range 50 {
		if got := login(app, "carol", "right", "203.0.113.8:4000"); got != http.StatusOK {
			t.Fatalf("successful login %d: %d, want 200", i+1, got)
		}
	}
}

// TestConcurrentFailures: 40 failed logins for one username at once reach
// the password check at most 5 times: the attempt is counted before the
// check, and given back only after a success.
func TestConcurrentFailures(t *testing.T) {
	app := newTestApp(t)
	var checked atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Many addresses: the per-address limit is not the one tested.
			addr := "198.51.100." + strconv.Itoa(i+1) + ":4000"
			if login(app, "dave", "wrong", addr) == http.StatusUnauthorized {
				checked.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("40 concurrent failed logins for one username: %d reached the password check (limit 5)", checked.Load())
	if checked.Load() != 5 {
		t.Fatalf("%d reached the password check; want 5", checked.Load())
	}
}

// TestAddressLimit: 20 failures a minute per address, whatever the
// usernames tried.
func TestAddressLimit(t *testing.T) {
	app := newTestApp(t)
	refused := 0
	for i := range 25 {
		if login(app, "user"+strconv.Itoa(i), "wrong", "192.0.2.1:4000") == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != 5 {
		t.Fatalf("%d of 25 failures from one address refused; want 5 (limit 20)", refused)
	}
}
