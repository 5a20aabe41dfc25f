package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

func ExampleNew() {
	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(),
		Limit:    core.PerMinute(2),
		FailMode: core.FailOpen,
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		res, _ := lim.Allow(context.Background(), "client-1")
		fmt.Println(res.Allowed, res.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// A RedisStore with the recommended client options, its own key prefix,
// and the script loaded at start-up. miniredis stands in for Redis here.
func ExampleNewRedisStore() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()

	rdb := redis.NewClient(&redis.Options{
		Addr:                  mr.Addr(),
		ContextTimeoutEnabled: true, // a stalled Redis frees the connection at each decision's deadline
	})
	defer rdb.Close()
	store := core.NewRedisStore(rdb, core.WithPrefix("myapp:"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.Preload(ctx); err != nil {
		fmt.Println("Redis does not answer:", err) // the app starts anyway; FailMode decides
	}

	lim, err := core.New(core.Config{Store: store, Name: "api", Limit: core.PerMinute(100), FailMode: core.FailOpen})
	if err != nil {
		panic(err)
	}
	res, _ := lim.Allow(ctx, "user-42")
	fmt.Println(res.Allowed, res.Remaining)
	fmt.Println(store.Key("api", "user-42"))
	// Output:
	// true 99
	// myapp:{user-42}:api
}

// Tests move a memory store's clock instead of sleeping.
func ExampleWithClock() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := core.NewMemoryStore(core.WithClock(func() time.Time { return now }))
	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(5), FailMode: core.FailClosed})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 5 {
		lim.Allow(ctx, "alice")
	}
	res, _ := lim.Allow(ctx, "alice")
	fmt.Println(res.Allowed, res.RetryAfter)

	now = now.Add(res.RetryAfter)
	res, _ = lim.Allow(ctx, "alice")
	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// false 12s
	// true 0
}

// What each FailMode answers while Redis is down.
func ExampleFailMode() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := core.NewRedisStore(rdb)
	mr.Close() // Redis goes away

	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed} {
		lim, err := core.New(core.Config{
			Store:    store,
			Name:     "login-" + mode.String(),
			Limit:    core.PerMinute(5),
			FailMode: mode,
			Logger:   slog.New(slog.DiscardHandler), // keep the example's output clean
		})
		if err != nil {
			panic(err)
		}
		res, _ := lim.Allow(context.Background(), "alice")
		fmt.Printf("%s: allowed=%t degraded=%t\n", mode, res.Allowed, res.Degraded)
	}
	// Output:
	// open: allowed=true degraded=true
	// closed: allowed=false degraded=true
}

// Several limits checked at once, all or nothing: 2 a second and 3 an hour.
func ExampleConfig_extra() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(core.WithClock(func() time.Time { return now })),
		Name:     "second",
		Limit:    core.PerSecond(2),
		Extra:    []core.NamedLimit{{Name: "hour", Limit: core.PerHour(3)}},
		FailMode: core.FailOpen,
	})
	if err != nil {
		panic(err)
	}
	for i := range 5 {
		res, _ := lim.Allow(context.Background(), "k")
		fmt.Println(res.Allowed, res.Name, res.Remaining, res.RetryAfter)
		if i == 2 {
			now = now.Add(time.Second) // the second's bucket refills; the hour's barely
		}
	}
	// Output:
	// true second 1 0s
	// true second 0 0s
	// false second 0 500ms
	// true hour 0 0s
	// false hour 0 19m59s
}

// Reset refills a key's bucket, for example after a successful login.
func ExampleLimiter_Reset() {
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(3), FailMode: core.FailClosed})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lim.AllowN(ctx, "alice", 3)
	res, _ := lim.Allow(ctx, "alice")
	fmt.Println("before:", res.Allowed)

	if err := lim.Reset(ctx, "alice"); err != nil {
		panic(err)
	}
	res, _ = lim.Allow(ctx, "alice")
	fmt.Println("after:", res.Allowed, res.Remaining)
	// Output:
	// before: false
	// after: true 2
}

// Two limits on one request, decided together: a client's own and its
// tenant's. The client's third request is refused, and charges the
// tenant nothing.
func ExampleAllowAll() {
	store := core.NewMemoryStore()
	perClient, _ := core.New(core.Config{Store: store, Name: "client", Limit: core.PerMinute(2), FailMode: core.FailOpen})
	perTenant, _ := core.New(core.Config{Store: store, Name: "tenant", Limit: core.PerMinute(100), FailMode: core.FailOpen})
	ctx := context.Background()
	for range 3 {
		res, each, err := core.AllowAll(ctx,
			core.Check{Limiter: perClient, Key: "10.0.0.1", N: 1},
			core.Check{Limiter: perTenant, Key: "acme", N: 1},
		)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Name, "tenant left:", each[1].Remaining)
	}
	// Output:
	// true client tenant left: 99
	// true client tenant left: 98
	// false client tenant left: 98
}
