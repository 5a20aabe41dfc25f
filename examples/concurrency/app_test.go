package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// stores are the Redis the app is tested on: miniredis, whose clock
// stands still, and the real Redis at REDIS_ADDR when it is set.
var stores = map[string]func(t *testing.T) core.Store{
	"miniredis": func(t *testing.T) core.Store {
		m := miniredis.RunT(t)
		m.SetTime(time.Unix(1_700_000_000, 0))
		return core.NewRedisStore(client(t, m.Addr()))
	},
	"redis": realRedis,
}

// realRedis returns a store on the Redis at REDIS_ADDR, its keys under a
// prefix of the test's own and deleted when the test ends; without
// REDIS_ADDR the test skips.
func realRedis(t *testing.T) core.Store {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Skip("REDIS_ADDR is not set: set it (e.g. 127.0.0.1:6379) to run this test against a real Redis")
	}
	c := client(t, addr)
	reachable(t, c, addr)
	prefix := "example-" + strconv.FormatUint(rand.Uint64(), 36) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return core.NewRedisStore(c, core.WithPrefix(prefix))
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

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// export is a stand-in export: each request holds its slot until release
// is called.
type export struct {
	started chan struct{}
	done    chan struct{}
}

func newExport() *export {
	return &export{started: make(chan struct{}, 16), done: make(chan struct{})}
}

func (e *export) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.started <- struct{}{}
	<-e.done
}

func (e *export) release() { close(e.done) }

// timeout is the apps' Timeout in tests: a loaded -race run can take a
// decision past the default 50 ms, and FailClosed would answer 503.
const timeout = time.Second

func get(app http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/export", nil)
	r.Header.Set("X-API-Key", key)
	w := httptest.NewRecorder()
	app.ServeHTTP(w, r)
	return w
}

func forEachStore(t *testing.T, f func(t *testing.T, store core.Store)) {
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, mk(t))
		})
	}
}

// TestAtMostTwoAtOnce: a key's third concurrent export is refused until
// one finishes, takes no token, and other keys are not affected.
func TestAtMostTwoAtOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store core.Store) {
		e := newExport()
		app, err := newApp(store, timeout, e)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if w := get(app, "k1"); w.Code != http.StatusOK {
					t.Errorf("a held export: %d", w.Code)
				}
			})
			<-e.started
		}
		w := get(app, "k1")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit-Remaining") != "0" {
			t.Fatalf("third export at once: %d %v; want 429, Retry-After 1, no slot left", w.Code, w.Header())
		}
		t.Logf("third export at once: %d, Retry-After %s, RateLimit-Remaining %s", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit-Remaining"))
		wg.Go(func() {
			if w := get(app, "k2"); w.Code != http.StatusOK {
				t.Errorf("another key's export: %d", w.Code)
			}
		})
		<-e.started // k2 runs while k1 holds both its slots
		e.release()
		wg.Wait()
		if w := get(app, "k1"); w.Code != http.StatusOK || w.Header().Get("RateLimit-Remaining") != "97" {
			t.Fatalf("after the exports finished: %d %v; want 200 with 97 tokens left", w.Code, w.Header())
		}
	})
}

// TestHundredAMinute: the 101st export in a minute is refused by the
// rate, and holds no slot.
func TestHundredAMinute(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store core.Store) {
		e := newExport()
		e.release() // exports finish at once
		go func() {
			for range e.started {
			}
		}()
		t.Cleanup(func() { close(e.started) })
		app, err := newApp(store, timeout, e)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		admitted := 0
		for ; admitted < 200; admitted++ {
			if w := get(app, "k1"); w.Code != http.StatusOK {
				if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
					t.Fatalf("request %d: %d %v; want 429 with Retry-After 1", admitted+1, w.Code, w.Header())
				}
				break
			}
		}
		// A token comes back every 600 ms: on a real Redis, a slow run
		// admits one more per 600 ms it took.
		extra := 0
		if _, ok := store.(*core.RedisStore); ok && time.Since(start) > 0 {
			extra = int(time.Since(start) / (600 * time.Millisecond))
		}
		if admitted < 100 || admitted > 100+extra {
			t.Fatalf("%d exports admitted before a refusal, want 100 (+%d)", admitted, extra)
		}
		t.Logf("%d exports admitted in %v, then 429 with Retry-After 1", admitted, time.Since(start).Round(time.Millisecond))
		// The refusal held no slot: two at once still go through.
		hold := newExport()
		held, err := newApp(store, timeout, hold)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, key := range []string{"k2", "k2"} {
			wg.Go(func() {
				if w := get(held, key); w.Code != http.StatusOK {
					t.Errorf("%s: %d", key, w.Code)
				}
			})
			<-hold.started
		}
		hold.release()
		wg.Wait()
	})
}

// TestRedisDown: with Redis unreachable, exports are refused with 503
// (FailClosed), never let through unlimited.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := client(t, m.Addr())
	m.Close()
	app, err := newApp(core.NewRedisStore(c), timeout, newExport())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if w := get(app, "k1"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("request %d with Redis down: %d %v; want 503 with Retry-After", i+1, w.Code, w.Header())
		}
	}
}
