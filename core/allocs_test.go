package core_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// scriptedClient answers every EVALSHA with one canned reply and allocates
// nothing, so what an allocation count sees is the limiter's own.
type scriptedClient struct {
	redis.UniversalClient
	reply *redis.Cmd
}

// AddHook takes the store's dial watch, which a canned client never needs.
func (c *scriptedClient) AddHook(redis.Hook) {}

func (c *scriptedClient) EvalSha(context.Context, string, []string, ...any) *redis.Cmd {
	return c.reply
}

// TestRedisPathAllocs: the limiter's and store's own allocations for a
// lone decision on the Redis path, excluding the client's: the script
// call's own context, bucket key, replay record key, keys and arguments
// (8). The request, its channel and its deadline timer come from a pool,
// and the idle carrier takes the call (no goroutine started, no batch
// slice). Under concurrency the script call's share is spread over its
// batch; DESIGN §8 compares the whole process with redis_rate in bench/.
func TestRedisPathAllocs(t *testing.T) {
	reply := redis.NewCmd(context.Background())
	reply.SetVal("1,99,0,10000")
	c := &scriptedClient{reply: reply}
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(100), FailMode: core.FailOpen})
	ctx := context.Background()
	if res, err := l.Allow(ctx, "user-1"); err != nil || !res.Allowed || res.Remaining != 99 {
		t.Fatalf("got %+v %v", res, err)
	}
	n := testing.AllocsPerRun(2000, func() { l.Allow(ctx, "user-1") })
	t.Logf("limiter's own allocations per Redis decision: %v", n)
	if n > 9 {
		t.Fatalf("%v allocs per Redis decision in the limiter, want ≤ 9", n)
	}
}
