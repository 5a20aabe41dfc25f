package core_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// BenchmarkClusterLone: one caller at a time on 10k keys through a Redis
// Cluster of 3 primaries of the test's own, the default configuration,
// the client with ContextTimeoutEnabled. "script" is a bare EVALSHA of a
// one-command script through the same client: go-redis's own cost.
func BenchmarkClusterLone(b *testing.B) {
	opts := redistest.StartCluster(b, 3, 0).Options()
	opts.ContextTimeoutEnabled = true
	c := redis.NewClusterClient(opts)
	defer c.Close()
	ks := keys(10000)
	ctx := context.Background()
	b.Run("ctxtimeout", func(b *testing.B) {
		l := limitertest.New(b, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(1 << 30),
			FailMode: core.FailClosed})
		for range 100 { // the slot map
			l.Allow(ctx, "warm")
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		i := 0
		for b.Loop() {
			if _, err := l.Allow(ctx, ks[i%len(ks)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("script", func(b *testing.B) {
		bareScript(b, c, ks, func(k string) string { return "{" + k + "}" })
	})
}

// BenchmarkRedisLone: one caller at a time on 10k keys, the default
// configuration, with both client settings, reporting the process's CPU
// time per decision too. "script" is a bare EVALSHA of a one-command
// script on the caller's goroutine: go-redis's own cost, a floor to read
// the others against on a loaded machine.
func BenchmarkRedisLone(b *testing.B) {
	addr := redistest.Addr(b)
	ks := keys(10000)
	ctx := context.Background()
	for _, ct := range []bool{true, false} {
		name := "plain"
		if ct {
			name = "ctxtimeout"
		}
		b.Run(name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ct})
			defer c.Close()
			l := limitertest.New(b, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(b))),
				Limit: core.PerSecond(1 << 30), FailMode: core.FailClosed})
			b.ReportAllocs()
			defer reportCPU(b)()
			i, degraded := 0, 0
			defer func() { b.ReportMetric(float64(degraded), "degraded") }()
			for b.Loop() {
				if r, err := l.Allow(ctx, ks[i%len(ks)]); err != nil {
					b.Fatal(err)
				} else if r.Degraded {
					degraded++
				}
				i++
			}
		})
	}
	b.Run("script", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		p := redistest.Prefix(b)
		bareScript(b, c, ks, func(k string) string { return p + k })
	})
}

// bareScript is the "script" floor of the lone benchmarks: one EVALSHA of
// a one-command script per op through c, on ks in turn, each keyed by key.
func bareScript(b *testing.B, c redis.Scripter, ks []string, key func(string) string) {
	// A write that expires, so that runs leave nothing in a shared Redis.
	s := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'EX', 10)`)
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b)()
	i := 0
	for b.Loop() {
		ctx, cancel := context.WithTimeout(ctx, 1e9)
		if err := s.Run(ctx, c, []string{key(ks[i%len(ks)])}, 1, 2, 3).Err(); err != nil {
			b.Fatal(err)
		}
		cancel()
		i++
	}
}

// reportCPU reports the process's CPU time (user and system) per op.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/float64(b.N)/1e3, "cpu-µs/op")
	}
}
