package core_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// batchingStore is the conformance suite's "redis-batching" store: the
// shared Redis, one key prefix per case (a RedisStore batches whenever
// calls overlap). The suite decides
// one step at a time, so its decisions go alone; TestBatchingConformance
// adds concurrent traffic so that they travel in pipelines.
func batchingStore(t *testing.T) clockStore {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	return clockStore{
		store:    core.NewRedisStore(c, core.WithPrefix(prefix)),
		advance:  func(d time.Duration) { backdate(t, c, prefix, d) },
		realTime: true,
	}
}

// pipeCounter counts the batches a client sends (pipelines, and calls of
// the batch script deciding several requests) and the decisions in them.
type pipeCounter struct {
	pipes, cmds, most atomic.Int64
}

func (p *pipeCounter) count(n int64) {
	p.pipes.Add(1)
	p.cmds.Add(n)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			break
		}
	}
}

func (*pipeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := batchScriptDecisions(cmd); n > 1 {
			p.count(n)
		}
		return next(ctx, cmd)
	}
}

func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.count(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// batchScriptDecisions returns how many requests cmd decides if it calls
// the batch script, or 0.
func batchScriptDecisions(cmd redis.Cmder) int64 {
	a := cmd.Args()
	if len(a) < 4 {
		return 0
	}
	switch name, _ := a[0].(string); name {
	case "evalsha":
		if a[1] != core.ScriptSHA() {
			return 0
		}
	case "eval":
		body, _ := a[1].(string)
		if fmt.Sprintf("%x", sha1.Sum([]byte(body))) != core.ScriptSHA() {
			return 0
		}
	default:
		return 0
	}
	nk, _ := a[2].(int)
	if len(a) <= 4+nk {
		return 0
	}
	if _, ok := a[4+nk].(string); ok {
		return 1 // a lone take: ARGV[2] is its first policy
	}
	n, _ := a[4+nk].(int) // ARGV[2]
	return int64(n)
}

// noise keeps g goroutines deciding other subjects through s until the
// returned stop is called, so that s's decisions travel in batches.
func noise(t *testing.T, s core.Store, g int) (stop func()) {
	t.Helper()
	p := []core.Policy{policyOf(t, "noise", core.PerSecond(1<<30))}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-done:
					return
				default:
				}
				if _, err := core.Take(context.Background(), s, fmt.Sprintf("noise-%d-%d", i, j%50), 1, p, nil); err != nil {
					t.Errorf("noise decision: %v", err)
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// TestBatchingConformance runs the conformance cases (one policy and
// several) against a batching store on a Redis of the test's own, while
// other goroutines keep deciding through the same store: every step of a
// case then waits for a batch in flight and travels in a pipeline.
func TestBatchingConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	pc := &pipeCounter{}
	c := srv.Client()
	c.AddHook(pc)
	t.Cleanup(func() { c.Close() })
	for _, tc := range conformance {
		t.Run(tc.name, func(t *testing.T) {
			if exactOnly[tc.name] {
				t.Skip("needs a stopped clock")
			}
			prefix := redistest.Prefix(t)
			s := core.NewRedisStore(c, core.WithPrefix(prefix))
			stop := noise(t, s, 4)
			defer stop()
			// Backdate the case's buckets, not the noise's ("{noise-…}").
			advance := func(d time.Duration) { backdate(t, c, prefix+"{[^n]", d) }
			runLoose(t, clockStore{store: s, advance: advance, realTime: true}, tc.limit, tc.steps)
		})
	}
	t.Run("multi-policy", func(t *testing.T) {
		s := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
		stop := noise(t, s, 6)
		defer stop()
		ps := secondAndHour(t)
		each := make([]core.Outcome, 2)
		ctx := context.Background()
		for i, wantRem := range []int64{1, 0} {
			got, err := s.Take(ctx, "k", 1, ps, each)
			if err != nil || !got.Allowed || got.Remaining != wantRem || each[1].Remaining != int64(2-i) {
				t.Fatalf("call %d: got %+v each %+v %v", i, got, each, err)
			}
		}
		got, err := s.Take(ctx, "k", 1, ps, each)
		if err != nil || got.Allowed || got.Policy != 0 || each[1].Remaining != 1 {
			t.Fatalf("third call: got %+v each %+v %v", got, each, err)
		}
	})
	if pc.pipes.Load() == 0 {
		t.Fatal("no pipeline sent: the cases never ran batched")
	}
	t.Logf("%d pipelines, %.1f decisions each", pc.pipes.Load(), float64(pc.cmds.Load())/float64(pc.pipes.Load()))
}

// batchingLimiters returns n limiters sharing prefix on addr, each with
// its own client (an app instance), half deciding under a deadline context.
func batchingLimiters(t *testing.T, addr, prefix string, n int, pc *pipeCounter, cfg core.Config) []*core.Limiter {
	t.Helper()
	return appInstances(t, n, prefix, cfg, func(i int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8, ContextTimeoutEnabled: i%2 == 0, MaxRetries: -1})
		c.AddHook(pc)
		return c
	})
}

// TestBatchingExactness: 16 batching instances (half deciding inline under
// a deadline context, half through a sender goroutine) race thousands of
// decisions on one key: the admitted count never exceeds C + R·Δ and a
// burst is always served; and a bucket never exhausted never denies.
func TestBatchingExactness(t *testing.T) {
	if testing.Short() {
		t.Skip("real-Redis load test")
	}
	srv := redistest.StartServer(t)
	const instances, goroutines, perG = 16, 8, 40
	for _, cache := range []int{-1, 0} {
		t.Run(map[int]string{-1: "script-only", 0: "denial-cache"}[cache], func(t *testing.T) {
			pc := &pipeCounter{}
			lim := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
			ls := batchingLimiters(t, srv.Addr(), redistest.Prefix(t), instances, pc, core.Config{
				Limit: lim, FailMode: core.FailClosed, Timeout: 2 * time.Second, DenyCacheSize: cache,
			})
			c := limitertest.Flood{Key: "hot", Goroutines: goroutines, Each: perG}.Run(t, ls...)
			bound := limitertest.Bound(lim, c.Elapsed) + 1
			t.Logf("%d decisions in %v: admitted %d, denied %d, degraded %d; bound %d; %d pipelines of %.1f decisions",
				instances*goroutines*perG, c.Elapsed.Round(time.Millisecond), c.Admitted, c.Denied, c.Degraded, bound,
				pc.pipes.Load(), float64(pc.cmds.Load())/max(1, float64(pc.pipes.Load())))
			checkExact(t, c, lim, bound)
			if cache == -1 && pc.pipes.Load() == 0 {
				t.Fatal("no pipeline sent: nothing was batched")
			}
		})
	}
	t.Run("never-exhausted", func(t *testing.T) {
		pc := &pipeCounter{}
		ls := batchingLimiters(t, srv.Addr(), redistest.Prefix(t), instances, pc, core.Config{
			Limit: core.PerHour(instances * goroutines * perG), FailMode: core.FailClosed, Timeout: 2 * time.Second,
		})
		c := limitertest.Flood{Key: "k", Goroutines: goroutines, Each: perG}.Run(t, ls...)
		if c.Denied != 0 || c.Degraded != 0 {
			t.Fatalf("%d denied, %d degraded from a bucket never exhausted", c.Denied, c.Degraded)
		}
		if pc.pipes.Load() == 0 {
			t.Fatal("no pipeline sent: nothing was batched")
		}
	})
}

// TestBatchingScriptFlush: SCRIPT FLUSH racing batched decisions. Commands
// refused with NOSCRIPT are re-sent with EVAL, and only those: the bucket
// ends holding exactly the tokens never admitted.
func TestBatchingScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	limit := core.Limit{Rate: 1, Period: time.Hour, Burst: 100000} // refill never shows in whole tokens
	pc := &pipeCounter{}
	prefix := redistest.Prefix(t)
	ls := batchingLimiters(t, srv.Addr(), prefix, 2, pc, core.Config{
		Limit: limit, FailMode: core.FailClosed, Timeout: 5 * time.Second,
	})
	key := core.NewRedisStore(admin, core.WithPrefix(prefix)).Key(ls[0].Name(), "subject")
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stopFlushing := flushScripts(ctx, admin, 2*time.Millisecond)
	c := limitertest.Flood{Key: "subject", Goroutines: 12, Each: 150}.Run(t, ls...)
	n := stopFlushing()
	if c.Degraded != 0 {
		t.Errorf("%d degraded decisions: NOSCRIPT must be handled, not degrade", c.Degraded)
	}
	want := int64(limit.Burst) - c.Admitted
	if got := bucketTokens(t, admin, key, limit); got != want {
		t.Errorf("after %d admitted decisions and %d flushes the bucket holds %d, want %d", c.Admitted, n, got, want)
	}
	t.Logf("%d decisions raced %d SCRIPT FLUSHes: %d admitted, bucket exact; %d pipelines of %.1f commands",
		2*12*150, n, c.Admitted, pc.pipes.Load(), float64(pc.cmds.Load())/max(1, float64(pc.pipes.Load())))
	if pc.pipes.Load() == 0 {
		t.Fatal("no pipeline sent: nothing was batched")
	}
}

// TestBatchingStalled: a server that stops answering (faultproxy Stall).
// No caller — leader of a batch, queued, or in a batch in flight — waits
// past Timeout plus scheduling slack; every decision degrades per
// FailMode; after the stall the store decides again and no goroutine is
// left behind. Both limiter paths: inline under a deadline context
// (ContextTimeoutEnabled) and a sender goroutine.
func TestBatchingStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test")
	}
	srv := redistest.StartServer(t)
	const timeout = 100 * time.Millisecond
	for _, inline := range []bool{true, false} {
		t.Run(map[bool]string{true: "inline", false: "worker"}[inline], func(t *testing.T) {
			p := faultproxy.Start(t, srv.Addr())
			before := runtime.NumGoroutine()
			type modeLimiter struct {
				mode core.FailMode
				l    *core.Limiter
				c    *redis.Client
			}
			var ls []modeLimiter
			prefix := redistest.Prefix(t)
			for _, mode := range faultModes {
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: inline, MaxRetries: -1,
					ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
				l := limitertest.New(t, core.Config{
					Store: core.NewRedisStore(c, core.WithPrefix(prefix+mode.String()+":")),
					Limit: core.PerSecond(1000), FailMode: mode, Instances: faultInstances, Timeout: timeout,
					DenyCacheSize: -1,
				})
				ls = append(ls, modeLimiter{mode, l, c})
				waitFor(t, faultRecMax, mode.String()+" healthy", func() bool {
					res, err := l.Allow(context.Background(), "probe")
					return err == nil && !res.Degraded
				})
			}

			p.SetMode(faultproxy.Stall)
			var worst atomic.Int64
			var decisions, degradedN atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for _, ml := range ls {
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Since(start) < 800*time.Millisecond {
							t0 := time.Now()
							res, err := ml.l.Allow(context.Background(), "k")
							lat := time.Since(t0)
							for {
								w := worst.Load()
								if int64(lat) <= w || worst.CompareAndSwap(w, int64(lat)) {
									break
								}
							}
							if err != nil {
								t.Errorf("%v: %v", ml.mode, err)
								return
							}
							decisions.Add(1)
							if !res.Degraded {
								t.Errorf("%v: store decision %+v during the stall", ml.mode, res)
								return
							}
							degradedN.Add(1)
							checkDegraded(t, ml.mode, res)
						}
					}()
				}
			}
			wg.Wait()
			// Slack for a loaded 2-CPU machine under -race; still under the
			// client's own 2 s timeouts, so a decision that waited for the
			// client rather than for Timeout fails.
			slack := time.Second
			t.Logf("stalled: %d decisions, all degraded; slowest %v (Timeout %v)", decisions.Load(), time.Duration(worst.Load()), timeout)
			if time.Duration(worst.Load()) > timeout+slack {
				t.Errorf("slowest decision %v; want ≤ Timeout %v + %v", time.Duration(worst.Load()), timeout, slack)
			}

			p.SetMode(faultproxy.Forward)
			for _, ml := range ls {
				waitFor(t, faultRecMax, ml.mode.String()+" deciding again", func() bool {
					res, err := ml.l.Allow(context.Background(), "probe2")
					return err == nil && !res.Degraded
				})
			}
			// Concurrent decisions after recovery: batched and healthy.
			var wg2 sync.WaitGroup
			for _, ml := range ls {
				for range 8 {
					wg2.Add(1)
					go func() {
						defer wg2.Done()
						for range 20 {
							res, _ := ml.l.Allow(context.Background(), "after")
							if res.Degraded {
								// A breaker probe still in its cooldown is fine; retry.
								time.Sleep(10 * time.Millisecond)
							}
						}
					}()
				}
			}
			wg2.Wait()
			for _, ml := range ls {
				ml.c.Close()
			}
			p.Close()
			// Workers leave after 2 s idle; proxy and client goroutines at once.
			waitFor(t, 10*time.Second, "goroutines back to their count before the stall", func() bool {
				return runtime.NumGoroutine() <= before+2
			})
		})
	}
}

// TestBatchingQueuedCallersBounded: callers of Take itself (no limiter)
// queued behind a batch that never returns each leave at their own
// deadline, and the store serves again afterwards.
func TestBatchingQueuedCallersBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	pol := []core.Policy{policyOf(t, "q", core.PerSecond(1000))}
	if _, err := s.Take(context.Background(), "warm", 1, pol, nil); err != nil {
		t.Fatal(err)
	}
	p.SetMode(faultproxy.Stall)
	var wg sync.WaitGroup
	var worst atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered deadlines: later callers queue behind earlier ones.
			d := time.Duration(50+5*i) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			t0 := time.Now()
			_, err := s.Take(ctx, fmt.Sprintf("k%d", i), 1, pol, nil)
			over := time.Since(t0) - d
			for {
				w := worst.Load()
				if int64(over) <= w || worst.CompareAndSwap(w, int64(over)) {
					break
				}
			}
			if err == nil {
				t.Errorf("caller %d: a decision from a stalled server", i)
			}
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	slack := 200 * time.Millisecond // a loaded 2-CPU machine, maybe -race
	if time.Duration(worst.Load()) > slack {
		t.Errorf("a caller waited %v past its deadline", time.Duration(worst.Load()))
	}
	p.SetMode(faultproxy.Forward)
	waitFor(t, faultRecMax, "store deciding again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.Take(ctx, "after", 1, pol, nil)
		return err == nil
	})
}

// TestBatchingLargeQueue: with hundreds of callers queued behind a slow
// batch, pipelines stay within their size bound and every decision is made
// once.
func TestBatchingLargeQueue(t *testing.T) {
	srv := redistest.StartServer(t)
	p := faultproxy.Start(t, srv.Addr())
	p.SetLatency(20 * time.Millisecond)
	pc := &pipeCounter{}
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	c.AddHook(pc)
	t.Cleanup(func() { c.Close() })
	prefix := redistest.Prefix(t)
	s := core.NewRedisStore(c, core.WithPrefix(prefix))
	limit := core.Limit{Rate: 1, Period: time.Hour, Burst: 100000}
	pol := []core.Policy{policyOf(t, "big", limit)}
	const callers, each = 700, 3
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if o, err := s.Take(context.Background(), "k", 1, pol, nil); err != nil || !o.Allowed {
					t.Errorf("got %+v %v", o, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d pipelines, largest %d, %.1f decisions each", pc.pipes.Load(), pc.most.Load(), float64(pc.cmds.Load())/max(1, float64(pc.pipes.Load())))
	if m := pc.most.Load(); m > 256 || m < 100 {
		t.Errorf("largest pipeline %d decisions; want batches filled up to 256", m)
	}
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	if got, want := bucketTokens(t, admin, s.Key("big", "k"), limit), int64(limit.Burst-callers*each); got != want {
		t.Errorf("bucket holds %d, want %d", got, want)
	}
}

// panickyClient answers its first script call when released, panics in
// its second (a client bug in the middle of a batch), and answers again
// after that.
type panickyClient struct {
	redis.UniversalClient
	entered, release chan struct{}
	calls            atomic.Int64
}

func (c *panickyClient) AddHook(redis.Hook) {}

func (c *panickyClient) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	switch c.calls.Add(1) {
	case 1:
		close(c.entered)
		<-c.release
	case 2:
		panic("client bug")
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetVal("1,9,0,1000")
	return cmd
}

// TestBatchingClientPanic: a panic while a batch is sent fails that
// batch's decisions with an error instead of leaving their callers waiting
// or crashing the process, and the store decides again afterwards. (Which
// of the queued decisions travel in the panicking call depends on which
// sender takes them.)
func TestBatchingClientPanic(t *testing.T) {
	c := &panickyClient{entered: make(chan struct{}), release: make(chan struct{})}
	s := core.NewRedisStore(c)
	pol := []core.Policy{policyOf(t, "p", core.PerSecond(10))}
	go s.Take(context.Background(), "first", 1, pol, nil)
	<-c.entered
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.Take(context.Background(), "queued", 1, pol, nil)
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond) // both queue behind "first"
	close(c.release)
	failed := 0
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				failed++
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a queued caller is still waiting after its batch's client panicked")
		}
	}
	if failed == 0 {
		t.Error("no decision of the panicking call got an error")
	}
	if o, err := s.Take(context.Background(), "after", 1, pol, nil); err != nil || !o.Allowed {
		t.Fatalf("after the panic: %+v %v", o, err)
	}
}

// TestBatchingCluster: on a ClusterClient decisions queue per node and
// travel in pipelines of one script call per subject; each subject,
// decided by one goroutine only, loses exactly one token per decision.
func TestBatchingCluster(t *testing.T) {
	c := startCluster(t).Client()
	t.Cleanup(func() { c.Close() })
	pc := &pipeCounter{}
	c.AddHook(pc)
	s := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	pol := []core.Policy{policyOf(t, "cl", core.PerHour(1000))}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := fmt.Sprintf("subject-%d", g)
			for i := range 40 {
				o, err := s.Take(context.Background(), subject, 1, pol, nil)
				if err != nil || !o.Allowed || o.Remaining != int64(999-i) {
					t.Errorf("%s decision %d: %+v %v; want allowed with %d left", subject, i, o, err, 999-i)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d pipelines, %.1f script calls each", pc.pipes.Load(), float64(pc.cmds.Load())/max(1, float64(pc.pipes.Load())))
}

// BenchmarkRedis: decisions on 10k keys through a Redis of the benchmark's
// own, on one goroutine and on many, with the client options the README
// recommends.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	ks := keys(10000)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	l := limitertest.New(b, core.Config{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(b))),
		Limit: core.PerSecond(1 << 30), FailMode: core.FailOpen, Timeout: time.Second})
	b.Run("serial", func(b *testing.B) {
		defer reportCPU(b)()
		allowKeys(b, l, ks)
	})
	b.Run("parallel", func(b *testing.B) {
		defer reportCPU(b)()
		b.SetParallelism(16)
		allowKeysParallel(b, l, ks)
	})
}
