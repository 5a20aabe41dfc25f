package core_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// BenchmarkClusterThroughput compares decisions/s on uniform keys through
// one Redis and through a Redis Cluster of 3 primaries (Cluster needs at
// least 3), each of the test's own, in one run:
//
//	go test -run '^$' -bench ClusterThroughput -benchtime 5s ./core
//
// Every Redis process here shares the machine's cores with the client, so
// the ratio says what one machine can show, not what three hosts would.
func BenchmarkClusterThroughput(b *testing.B) {
	for _, primaries := range []int{1, 3} {
		b.Run("primaries="+strconv.Itoa(primaries), func(b *testing.B) {
			var c redis.UniversalClient
			if primaries == 1 {
				c = redis.NewClient(&redis.Options{Addr: redistest.StartServer(b).Addr()})
			} else {
				c = redis.NewClusterClient(redistest.StartCluster(b, primaries, 0).Options())
			}
			defer c.Close()
			l := limitertest.New(b, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(1 << 30),
				FailMode: core.FailOpen, Timeout: 1e9})
			ks := keys(100000)
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow(context.Background(), ks[next.Add(1)%int64(len(ks))])
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
