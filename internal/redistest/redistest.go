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
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Required reports whether RATELIMIT_REQUIRE_REDIS=1 asks tests to fail,
// not skip, when Redis is missing.
func Required() bool { return os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" }

// Unavailable skips t, or fails it when Redis is required.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("redistest: RATELIMIT_REQUIRE_REDIS=1 but "+format, args...)
	}
	t.Skipf("redistest: "+format, args...)
}

// Addr returns the address of the shared Redis server, skipping (or
// failing) t when nothing answers there. Never FLUSHALL, CLIENT PAUSE,
// CONFIG SET or SHUTDOWN it: other packages' tests share it. Use Prefix.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unavailable(t, "no Redis at REDIS_ADDR=%s: %v", addr, err)
	}
	return addr
}

// Client returns a new client of the shared Redis server, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test run, so tests sharing one
// Redis never meet. It ends in ':'.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rltest:" + hex.EncodeToString(b[:]) + ":"
}
