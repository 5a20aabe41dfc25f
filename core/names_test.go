package core_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestNoSilentSharing: two live limiters on one store share buckets only
// when both were given the same Name on purpose. Before, /login and
// /password-reset, both PerMinute(3) by IP, shared one bucket per client.
func TestNoSilentSharing(t *testing.T) {
	t.Parallel()
	cfg := func(s core.Store, name string, extra ...core.NamedLimit) core.Config {
		return core.Config{Store: s, Limit: core.PerMinute(3), Name: name, Extra: extra, FailMode: core.FailOpen}
	}
	for name, store := range map[string]func() core.Store{
		"memory": func() core.Store { return core.NewMemoryStore() },
		"redis":  func() core.Store { return core.NewRedisStore(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})) },
	} {
		t.Run(name, func(t *testing.T) {
			s := store()
			login := limitertest.New(t, cfg(s, ""))
			_, err := core.New(cfg(s, ""))
			if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), `"3-per-1m0s"`) || !strings.Contains(err.Error(), "Config.Name") {
				t.Fatalf("a second limiter with the same default name: %v; want an error saying to set Name", err)
			}
			t.Logf("what the user gets: %v", err)
			if _, err := core.New(cfg(s, "3-per-1m0s")); err == nil {
				t.Fatal("an explicit Name equal to another limiter's default name was accepted")
			}
			if _, err := core.New(cfg(s, "reset")); err != nil {
				t.Fatalf("an explicit Name of its own: %v", err)
			}
			a := limitertest.New(t, cfg(s, "shared"))
			b := limitertest.New(t, cfg(s, "shared"))
			if _, err := core.New(cfg(s, "other", core.NamedLimit{Limit: core.PerMinute(3)})); err == nil {
				t.Fatal("an Extra limit with another limiter's default name was accepted")
			}
			if _, err := core.New(cfg(store(), "")); err != nil {
				t.Fatalf("the same default name on another store: %v", err)
			}
			runtime.KeepAlive(login)
			login = nil
			if _, err := core.New(cfg(s, "")); err != nil {
				t.Fatalf("the default name of a dropped limiter: %v", err)
			}
			runtime.KeepAlive(a)
			runtime.KeepAlive(b)
		})
	}
}

// TestNilRedisClient: a nil *redis.Client typed into the interface is
// refused at New, not a nil-pointer panic at the first decision.
func TestNilRedisClient(t *testing.T) {
	t.Parallel()
	var c *redis.Client
	_, err := core.New(core.Config{Store: core.NewRedisStore(c), Limit: core.PerMinute(3), FailMode: core.FailOpen})
	if !errors.Is(err, core.ErrNoStore) {
		t.Fatalf("got %v, want ErrNoStore", err)
	}
	t.Logf("what the user gets: %v", err)
}

// TestWrongAddressSaysWhy: a wrong Redis address fails decisions past
// Timeout (go-redis retries the dial); once the store has said why, the
// error reported says it too, not only "timed out".
func TestWrongAddressSaysWhy(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for go-redis's dial retries")
	}
	c := redis.NewClient(&redis.Options{Addr: "no-such-host.invalid:6379"})
	defer c.Close()
	var last atomic.Value
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerMinute(3), FailMode: core.FailOpen,
		Timeout: core.DefaultTimeout, BreakerFailures: 1 << 30, Observer: onStoreError(func(err error) { last.Store(err.Error()) })})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l.Allow(context.Background(), "k")
		if s, _ := last.Load().(string); strings.Contains(s, "no such host") || strings.Contains(s, "lookup") {
			t.Logf("what the user gets: %s", s)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("last error reported: %v; want the dial error", last.Load())
}
