package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// BenchmarkAllowAll compares, on one Redis, a decision across k = 3 keys
// (AllowAll) with one AllowN and with three AllowN chained as three
// middlewares would: decisions/s and script calls (round trips, when
// serial) per decision, and this process's CPU per decision.
//
//	go test -run '^$' -bench BenchmarkAllowAll -benchtime 3s ./core
func BenchmarkAllowAll(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), ContextTimeoutEnabled: true})
	defer c.Close()
	calls := &scriptRuns{}
	c.AddHook(calls)
	store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(b)))
	var ls []*core.Limiter
	for _, name := range []string{"ip", "tenant", "route"} {
		ls = append(ls, limitertest.New(b, core.Config{Store: store, Name: name, Limit: core.PerSecond(1 << 30),
			FailMode: core.FailOpen, Timeout: time.Second}))
	}
	ctx := context.Background()
	ks := keys(10000)
	ways := []struct {
		name   string
		decide func(i int)
	}{
		{"AllowN", func(i int) { ls[0].AllowN(ctx, ks[i%len(ks)], 1) }},
		{"AllowAll-k1", func(i int) { core.AllowAll(ctx, core.Check{ls[0], ks[i%len(ks)], 1}) }},
		{"AllowAll-k3", func(i int) {
			core.AllowAll(ctx, core.Check{ls[0], ks[i%len(ks)], 1}, core.Check{ls[1], ks[i%100], 1}, core.Check{ls[2], "*", 1})
		}},
		{"chained-3", func(i int) {
			ls[0].AllowN(ctx, ks[i%len(ks)], 1)
			ls[1].AllowN(ctx, ks[i%100], 1)
			ls[2].AllowN(ctx, "*", 1)
		}},
	}
	for _, w := range ways {
		for _, par := range []int{0, 8} {
			name := w.name + "/serial"
			if par > 0 {
				name = w.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				before := calls.calls.Load()
				start := time.Now()
				cpu := reportCPU(b)
				if par == 0 {
					i := 0
					for b.Loop() {
						w.decide(i)
						i++
					}
				} else {
					b.SetParallelism(par)
					b.RunParallel(func(pb *testing.PB) {
						i := 0
						for pb.Next() {
							w.decide(i)
							i += 7
						}
					})
				}
				cpu()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
				b.ReportMetric(float64(calls.calls.Load()-before)/float64(b.N), "calls/decision")
			})
		}
	}
}

// scriptRuns is a go-redis hook that counts the decision script's calls
// (EVALSHA, EVAL) a client makes; its own retries, below the hook, are
// not counted.
type scriptRuns struct{ calls atomic.Int64 }

func (*scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && (a[0] == "evalsha" && a[1] == core.ScriptSHA() || a[0] == "eval") {
			s.calls.Add(1)
		}
		return next(ctx, cmd)
	}
}

// BenchmarkAllowAllClient is BenchmarkAllowAll's client side alone: the
// limiter's and store's work for a decision on the Redis path, each
// script call answered at once by a canned reply (no network, no
// server), for one AllowN and AllowAll of 1 and of 3 checks.
func BenchmarkAllowAllClient(b *testing.B) {
	reply := redis.NewCmd(context.Background())
	reply.SetVal("1,99,0,10000,99,0,10000,99,0,10000")
	store := core.NewRedisStore(&scriptedClient{reply: reply})
	var ls []*core.Limiter
	for _, name := range []string{"ip", "tenant", "route"} {
		ls = append(ls, limitertest.New(b, core.Config{Store: store, Name: name, Limit: core.PerSecond(100), FailMode: core.FailOpen}))
	}
	ctx := context.Background()
	ks := keys(10000)
	for _, w := range []struct {
		name   string
		decide func(i int)
	}{
		{"AllowN", func(i int) { ls[0].AllowN(ctx, ks[i%len(ks)], 1) }},
		{"AllowAll-k1", func(i int) { core.AllowAll(ctx, core.Check{ls[0], ks[i%len(ks)], 1}) }},
		{"AllowAll-k3", func(i int) {
			core.AllowAll(ctx, core.Check{ls[0], ks[i%len(ks)], 1}, core.Check{ls[1], ks[i%100], 1}, core.Check{ls[2], "*", 1})
		}},
	} {
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w.decide(i)
				i++
			}
		})
	}
}
