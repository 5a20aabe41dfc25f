package core_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func BenchmarkTmpRawEval(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	s := redis.NewScript(`return redis.call('TIME')`)
	ctx := context.Background()
	s.Run(ctx, c, []string{"x"})
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			s.Run(ctx, c, []string{"x"})
		}
	})
	b.Run("parallel16", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Run(ctx, c, []string{"x"})
			}
		})
	})
}
