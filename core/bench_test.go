package core_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "user-" + strconv.Itoa(i)
	}
	return ks
}

// allowKeys has l decide the keys ks in turn, b.N decisions.
func allowKeys(b *testing.B, l *core.Limiter, ks []string) {
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Allow(ctx, ks[i%len(ks)])
		i++
	}
}

// allowKeysParallel is allowKeys on b.RunParallel's goroutines, each
// stepping 7 keys at a time.
func allowKeysParallel(b *testing.B, l *core.Limiter, ks []string) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(ctx, ks[i%len(ks)])
			i += 7
		}
	})
}

func BenchmarkMemoryDecision(b *testing.B) {
	ctx := context.Background()
	l := limitertest.New(b, core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1 << 30), FailMode: core.FailOpen})
	b.Run("hot-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(ctx, "k")
		}
	})
	ks := keys(10000)
	for _, k := range ks {
		l.Allow(ctx, k)
	}
	b.Run("10k-keys", func(b *testing.B) { allowKeys(b, l, ks) })
	b.Run("10k-keys-parallel", func(b *testing.B) { allowKeysParallel(b, l, ks) })
}

func BenchmarkRedisDecision(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	defer c.Close()
	l := limitertest.New(b, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(b))),
		Limit: core.PerSecond(1 << 30), FailMode: core.FailOpen, Timeout: 1e9})
	ks := keys(10000)
	b.Run("serial", func(b *testing.B) { allowKeys(b, l, ks) })
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		allowKeysParallel(b, l, ks)
	})
}
