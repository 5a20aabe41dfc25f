package bench_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/bench"
)

// runner is shared by the benchmarks. Its Redis is started on first use
// (a redis-server of our own) unless BENCH_REDIS_ADDR names one, whose INFO
// counters then include other traffic.
var (
	runner     = bench.NewRunner("")
	redisOnce  sync.Once
	redisErr   error
	ownServer  *bench.RedisServer
	redisReady *bench.Runner
)

// withRedis returns the runner for Redis peers, or skips b.
func withRedis(b *testing.B) *bench.Runner {
	b.Helper()
	redisOnce.Do(func() {
		addr := os.Getenv("BENCH_REDIS_ADDR")
		if addr == "" {
			if ownServer, redisErr = bench.StartRedis(); redisErr != nil {
				return
			}
			addr = ownServer.Addr
		}
		redisReady = bench.NewRunner(addr)
		redisReady.Env.Timeout = time.Second // see Env.Timeout
	})
	if redisErr != nil {
		b.Skip("no Redis:", redisErr)
	}
	return redisReady
}

func TestMain(m *testing.M) {
	code := m.Run()
	if redisReady != nil {
		redisReady.Close()
	}
	if ownServer != nil {
		ownServer.Stop()
	}
	os.Exit(code)
}

var (
	roomy = bench.Limit{Rate: 1_000_000_000, Period: time.Minute, Burst: 1_000_000_000}
	keys  = map[string][]string{"10k-keys": bench.Keys(10_000), "hot-key": bench.Keys(1)}
)

func name(s string) string { return strings.NewReplacer(" ", "_", "/", "-").Replace(s) }

// BenchmarkRedis runs every Redis peer on one hot key and on 10k keys,
// 16 goroutines per CPU, and reports Redis round trips and commands per
// decision next to ns/op and allocs/op.
func BenchmarkRedis(b *testing.B) {
	r := withRedis(b)
	for _, ks := range []string{"10k-keys", "hot-key"} {
		for _, p := range bench.RedisPeers {
			b.Run(ks+"/"+name(p.Name), func(b *testing.B) {
				runParallel(b, r, p, keys[ks], "b:"+ks+":"+name(p.Name)+":")
			})
		}
	}
}

// BenchmarkMemory runs the in-process peers likewise.
func BenchmarkMemory(b *testing.B) {
	for _, ks := range []string{"10k-keys", "hot-key"} {
		for _, p := range bench.MemoryPeers {
			b.Run(ks+"/"+name(p.Name), func(b *testing.B) {
				runParallel(b, runner, p, keys[ks], "")
			})
		}
	}
}

func runParallel(b *testing.B, runner *bench.Runner, p bench.Peer, ks []string, prefix string) {
	ctx := context.Background()
	inst, err := p.New(runner.Env, roomy, prefix)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	w := inst.NewWorker()
	for _, k := range ks { // create every key before timing
		if _, err := w(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	var before bench.ServerStats
	if p.Redis {
		if before, err = bench.ReadServerStats(ctx, runner.Admin); err != nil {
			b.Fatal(err)
		}
	}
	trips := runner.Env.Trips.Load()
	var goroutine, errs atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := inst.NewWorker()
		i := int(goroutine.Add(1)) * 7919 % len(ks)
		for pb.Next() {
			if _, err := w(ctx, ks[i]); err != nil {
				errs.Add(1)
			}
			if i++; i == len(ks) {
				i = 0
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	if p.Redis {
		after, err := bench.ReadServerStats(ctx, runner.Admin)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(after.Sub(before).Total())/float64(b.N), "rediscmds/op")
		b.ReportMetric(float64(runner.Env.Trips.Load()-trips)/float64(b.N), "trips/op")
	}
	if n := errs.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "errors/op")
	}
}

// BenchmarkRatelimitSerial is one goroutine deciding through Redis: the
// cleanest allocation profile of the library's Redis path
// (go test -bench RatelimitSerial -memprofile mem.out).
func BenchmarkRatelimitSerial(b *testing.B) {
	r := withRedis(b)
	ctx := context.Background()
	inst, err := bench.RedisPeers[0].New(r.Env, roomy, "serial:")
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	w := inst.NewWorker()
	ks := keys["10k-keys"]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w(ctx, ks[i%len(ks)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemorySerial is one goroutine over 10k keys: the per-decision
// cost DESIGN §8 budgets (≤ 100 ns/op, 0 allocs), without contention.
func BenchmarkMemorySerial(b *testing.B) {
	ctx := context.Background()
	for _, p := range bench.MemoryPeers {
		b.Run(name(p.Name), func(b *testing.B) {
			inst, err := p.New(runner.Env, roomy, "")
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Close()
			w := inst.NewWorker()
			ks := keys["10k-keys"]
			for _, k := range ks {
				_, _ = w(ctx, k)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, _ = w(ctx, ks[i%len(ks)])
			}
		})
	}
}
