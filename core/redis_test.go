package core_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// commandCalls reads INFO commandstats: calls per command name.
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// TestScriptIsLean counts what one decision costs Redis: one EVALSHA from
// the client; inside it MGET, TIME and two SETs when allowed (the bucket,
// then the call's replay record), MGET and TIME only (no write) when denied.
func TestScriptIsLean(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerHour(1), FailMode: core.FailClosed, DenyCacheSize: -1, Timeout: time.Second})
	l.Allow(ctx, "warm-up") // loads the script (NOSCRIPT, then EVAL)
	for _, tc := range []struct {
		name  string
		key   string
		allow bool
		want  map[string]int
	}{
		{"allowed", "k", true, map[string]int{"evalsha": 1, "time": 1, "mget": 1, "setex": 2}},
		{"denied", "k", false, map[string]int{"evalsha": 1, "time": 1, "mget": 1}},
	} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		res, _ := l.Allow(ctx, tc.key)
		if res.Allowed != tc.allow || res.Degraded {
			t.Fatalf("%s: got %+v", tc.name, res)
		}
		got := commandCalls(t, c)
		delete(got, "config|resetstat")
		delete(got, "config")
		delete(got, "info")
		for cmd, n := range tc.want {
			if got[cmd] != n {
				t.Errorf("%s: %s called %d times, want %d (all: %v)", tc.name, cmd, got[cmd], n, got)
			}
			delete(got, cmd)
		}
		if len(got) != 0 {
			t.Errorf("%s: unexpected commands %v", tc.name, got)
		}
	}
}

// TestBucketKeyExpiresWhenFull: a bucket's key lives until the bucket would
// be full again, plus a second, and a denial neither rewrites it nor
// extends it.
func TestBucketKeyExpiresWhenFull(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s := core.NewRedisStore(c, core.WithPrefix(prefix))
	l := limitertest.New(t, core.Config{Store: s, Limit: core.PerMinute(2), Name: "ttl", FailMode: core.FailClosed, DenyCacheSize: -1, Timeout: time.Second})
	ctx := context.Background()
	key := s.Key("ttl", "k")
	if key != prefix+"{k}:ttl" {
		t.Fatalf("key %q, want %q", key, prefix+"{k}:ttl")
	}
	l.Allow(ctx, "k")
	l.Allow(ctx, "k")
	v1 := c.Get(ctx, key).Val()
	ttl1 := c.PTTL(ctx, key).Val()
	// Empty bucket: full again in 60 s, key kept 61 s.
	if ttl1 <= 60*time.Second || ttl1 > 61*time.Second {
		t.Fatalf("PTTL %v after emptying a 2-per-minute bucket, want (60s, 61s]", ttl1)
	}
	if res, _ := l.Allow(ctx, "k"); res.Allowed {
		t.Fatal("third request allowed")
	}
	if v2, ttl2 := c.Get(ctx, key).Val(), c.PTTL(ctx, key).Val(); v2 != v1 || ttl2 > ttl1 {
		t.Fatalf("a denial wrote the bucket: %q (ttl %v) became %q (ttl %v)", v1, ttl1, v2, ttl2)
	}
}

func TestPreload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	s := core.NewRedisStore(c)
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l := limitertest.New(t, core.Config{Store: s, Limit: core.PerHour(1), FailMode: core.FailClosed, Timeout: time.Second})
	if res, _ := l.Allow(ctx, "k"); !res.Allowed || res.Degraded {
		t.Fatalf("got %+v", res)
	}
	if got := commandCalls(t, c); got["eval"] != 0 || got["evalsha"] != 1 {
		t.Fatalf("after Preload, the first decision made %d EVAL and %d EVALSHA, want 0 and 1", got["eval"], got["evalsha"])
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.Preload(ctx); err == nil {
		t.Fatal("Preload against a dead Redis: no error")
	}
}

func TestPreloadCluster(t *testing.T) {
	cl := startCluster(t)
	c := cl.Client()
	ctx := context.Background()
	if err := core.NewRedisStore(c).Preload(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error {
		loaded, err := shard.ScriptExists(ctx, core.ScriptSHA()).Result()
		if err != nil || !loaded[0] {
			t.Errorf("primary %s: script not loaded (%v)", shard.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLongKeyDigestedOnce: a key too long to keep is digested once, by
// the Limiter, and RedisStore.Key names the bucket it decides.
func TestLongKeyDigestedOnce(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	store := core.NewRedisStore(c)
	l := limitertest.New(t, core.Config{Store: store, Limit: core.PerMinute(5), FailMode: core.FailClosed, Name: "long"})
	key := strings.Repeat("k", 200)
	if res, err := l.Allow(context.Background(), key); err != nil || !res.Allowed {
		t.Fatalf("got %+v, %v", res, err)
	}
	want := store.Key("long", key)
	if keys := m.Keys(); len(keys) != 2 || !slices.Contains(keys, want) {
		t.Fatalf("keys %q; want the bucket %q and the call's replay record", keys, want)
	}
}
