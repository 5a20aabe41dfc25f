// Package redistest gives tests a real Redis: the shared server at
// REDIS_ADDR (default 127.0.0.1:6379) through Addr, Client and Prefix, or
// redis-server processes of their own on free loopback ports for tests that
// kill, stall, pause or reconfigure one:
//
//   - StartServer: a standalone server (Kill, Restart, Stall, Pause).
//   - StartCluster: a Redis Cluster of N primaries and their replicas.
//   - StartSentinel: a primary, a replica and three sentinels (KillPrimary,
//     WaitFailover, FailoverClient).
//
// Processes of a test's own are killed and their directories removed when
// the test ends, pass or fail; on Linux they also die with the test binary.
// Cluster and Sentinel take seconds to form and skip under -short.
//
// When no Redis can be had (nothing answers at REDIS_ADDR, or redis-server
// is not on PATH), tests skip — unless RATELIMIT_REQUIRE_REDIS=1 (set by
// .ci/run), and then they fail.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Required reports whether RATELIMIT_REQUIRE_REDIS=1 asks tests to fail,
// not skip, when Redis is missing.
func Required() bool { return os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" }

// Unavailable skips t with one line saying what is missing and how to
// have it (format's text), or fails it when Redis is required.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("redistest: RATELIMIT_REQUIRE_REDIS=1 but %s", what)
	}
	t.Skipf("redistest: %s; RATELIMIT_REQUIRE_REDIS=1 makes this fail", what)
}

// sharedAddr is REDIS_ADDR, or 127.0.0.1:6379.
func sharedAddr() string {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// ping asks the shared server once per test binary whether it answers:
// without one, each test that needs it skips at once.
var ping = sync.OnceValue(func() error {
	c := redis.NewClient(&redis.Options{Addr: sharedAddr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
})

// Addr returns the address of the shared Redis server, skipping (or
// failing) t when nothing answers there. Never FLUSHALL, CLIENT PAUSE,
// CONFIG SET or SHUTDOWN it: other packages' tests share it. Use Prefix.
func Addr(t testing.TB) string {
	t.Helper()
	if err := ping(); err != nil {
		Unavailable(t, "no Redis at %s (%v): run `make redis-up` or set REDIS_ADDR", sharedAddr(), err)
	}
	shared.Store(true)
	return sharedAddr()
}

// Installed skips (or fails) t unless redis-server and redis-cli are on
// PATH. A test that starts one topology for its subtests calls it in each
// subtest first: then the skip is the subtest's, not its parent's.
func Installed(t testing.TB) {
	t.Helper()
	lookPath(t, "redis-server")
	lookPath(t, "redis-cli")
}

// Client returns a new client of the shared Redis server, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test run, so tests sharing one
// Redis never meet. It ends in ':'. When t ends, every key of the shared
// server under it is deleted, so that the suite leaves nothing behind
// (keys on a server of t's own go with the server).
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "rltest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		if shared.Load() {
			if err := deleteKeys(p); err != nil {
				t.Logf("redistest: deleting the keys under %s at %s: %v", p, sharedAddr(), err)
			}
		}
	})
	return p
}

// shared is set once a test of this binary has had the shared server's
// address: only then can a prefix have keys there.
var shared atomic.Bool

// deleteKeys deletes every key of the shared server that starts with
// prefix, which holds no glob characters.
func deleteKeys(prefix string) error {
	c := redis.NewClient(&redis.Options{Addr: sharedAddr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
