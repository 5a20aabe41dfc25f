package core_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
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

// The fault matrix. Each test injects one fault into a Redis of its own
// while one limiter per FailMode keeps deciding, each limiter with a client
// of its own (go-redis defaults: 3 s reads, 3 retries), so one mode's
// breaker and pool never touch another's. For every mode it checks what the
// FailMode promises, and logs a "fault matrix:" line with the slowest
// decision during the fault and the time from the fault's end to the first
// decision the store made again; RELIABILITY.md quotes those lines.
//
// Bounds asserted here are coarse on purpose (the machine is shared and the
// race detector slows everything): "well under the client's 3 s read
// timeout", never a benchmark.

var faultModes = []core.FailMode{core.FailOpen, core.FailClosed, core.FailLocal}

const (
	faultInstances = 2               // Config.Instances for FailLocal
	faultWorstMax  = 1 * time.Second // coarse bound on one decision during a fault
	faultRecMax    = 10 * time.Second
)

// faultLimiter is one FailMode's limiter in a fault test.
type faultLimiter struct {
	mode   core.FailMode
	lim    *core.Limiter
	store  *core.RedisStore
	client *redis.Client
	errs   atomic.Int64 // degraded decisions observed
	last   atomic.Value // last cause observed
}

// faultLimiters returns a limiter per FailMode on the Redis at addr, with
// limit, default Config otherwise unless edit changes it.
func faultLimiters(t *testing.T, addr string, limit core.Limit, edit func(*core.Config)) []*faultLimiter {
	t.Helper()
	prefix := redistest.Prefix(t)
	var ls []*faultLimiter
	for _, mode := range faultModes {
		fl := &faultLimiter{mode: mode}
		fl.client = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { fl.client.Close() })
		fl.store = core.NewRedisStore(fl.client, core.WithPrefix(prefix+mode.String()+":"))
		cfg := core.Config{
			Store: fl.store, Limit: limit, FailMode: mode, Instances: faultInstances,
			Timeout:  core.DefaultTimeout, // what an outage costs a decision is the subject
			Observer: onStoreError(func(err error) { fl.errs.Add(1); fl.last.Store(fmt.Errorf("%w", err)) }),
		}
		if edit != nil {
			edit(&cfg)
		}
		fl.lim = limitertest.New(t, cfg)
		ls = append(ls, fl)
	}
	return ls
}

// faultHealthy waits until every limiter's store decides key (a loaded
// machine can make one healthy call miss a 50 ms Timeout).
func faultHealthy(t *testing.T, ls []*faultLimiter, key string) {
	t.Helper()
	for _, fl := range ls {
		waitFor(t, faultRecMax, fl.mode.String()+" limiter healthy before the fault", func() bool {
			res, err := fl.lim.Allow(context.Background(), key)
			return err == nil && !res.Degraded
		})
	}
}

// faultStats is what one mode's limiter did during a fault.
type faultStats struct {
	decisions, degraded, allowed int
	worst                        time.Duration
	elapsed                      time.Duration
}

// faultDuring makes decisions on key from every limiter, four goroutines
// each, for d, checking each degraded decision against its mode. With
// allDegraded, every decision must be degraded.
func faultDuring(t *testing.T, ls []*faultLimiter, key string, d time.Duration, allDegraded bool) map[core.FailMode]*faultStats {
	t.Helper()
	stats := map[core.FailMode]*faultStats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, fl := range ls {
		st := &faultStats{}
		stats[fl.mode] = st
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < d {
					t0 := time.Now()
					res, err := fl.lim.Allow(context.Background(), key)
					lat := time.Since(t0)
					if err != nil {
						t.Errorf("%v: Allow: %v (store trouble must never be an error)", fl.mode, err)
						return
					}
					if allDegraded && !res.Degraded {
						t.Errorf("%v: got a store decision %+v during the fault", fl.mode, res)
					}
					if res.Degraded {
						checkDegraded(t, fl.mode, res)
					}
					mu.Lock()
					st.decisions++
					if res.Degraded {
						st.degraded++
					}
					if res.Allowed {
						st.allowed++
					}
					st.worst = max(st.worst, lat)
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	for _, st := range stats {
		st.elapsed = time.Since(start)
		if st.worst > faultWorstMax {
			t.Errorf("slowest decision during the fault %v; want well under the client's 3 s read timeout", st.worst)
		}
	}
	return stats
}

// checkDegraded checks a degraded decision against what mode promises.
func checkDegraded(t *testing.T, mode core.FailMode, res core.Result) {
	t.Helper()
	switch mode {
	case core.FailOpen:
		if !res.Allowed {
			t.Errorf("FailOpen degraded decision %+v: want allowed", res)
		}
	case core.FailClosed:
		if res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Second {
			t.Errorf("FailClosed degraded decision %+v: want denied with 0 < RetryAfter ≤ 1 s", res)
		}
	case core.FailLocal:
		if res.Limit.Period%faultInstances != 0 {
			t.Errorf("FailLocal degraded decision %+v: want the local limit (Period × %d)", res, faultInstances)
		}
	}
}

// checkLocalBound checks that FailLocal admitted no more than its
// in-process bucket allows: C + R·Δ of Limit / Instances.
func checkLocalBound(t *testing.T, limit core.Limit, st *faultStats) {
	t.Helper()
	c := max(1, limit.Capacity()/faultInstances)
	perSec := float64(limit.Rate) / (limit.Period.Seconds() * faultInstances)
	bound := c + int(perSec*st.elapsed.Seconds()) + 1
	if st.allowed > bound {
		t.Errorf("FailLocal admitted %d in %v; want ≤ %d (Limit / Instances)", st.allowed, st.elapsed, bound)
	}
}

// faultRecovery polls every limiter until its store decides again and
// returns each mode's time from healed.
func faultRecovery(t *testing.T, ls []*faultLimiter, key string, healed time.Time) map[core.FailMode]time.Duration {
	t.Helper()
	rec := map[core.FailMode]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, fl := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := fl.lim.Allow(context.Background(), key)
				if err == nil && !res.Degraded {
					break
				}
				if time.Since(healed) > faultRecMax {
					t.Errorf("%v: no store decision within %v of the fault's end", fl.mode, faultRecMax)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			rec[fl.mode] = time.Since(healed)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return rec
}

// logFault writes the fault matrix line of each mode.
func logFault(t *testing.T, fault string, stats map[core.FailMode]*faultStats, rec map[core.FailMode]time.Duration) {
	t.Helper()
	for _, m := range faultModes {
		st := stats[m]
		if st == nil {
			st = &faultStats{}
		}
		r := "-"
		if d, ok := rec[m]; ok {
			r = d.Round(time.Millisecond).String()
		}
		t.Logf("fault matrix: %-22s %-6v decisions %5d degraded %5d allowed %5d worst %9v recovery %v",
			fault, m, st.decisions, st.degraded, st.allowed, st.worst.Round(100*time.Microsecond), r)
	}
}

// bucketTokens reads the whole tokens stored in a bucket key (the script's
// "<units>:<µs>" value), or -1 when the key does not exist (a full bucket).
// flushScripts sends SCRIPT FLUSH to admin at once and then every
// interval, until the returned stop is called; stop returns how many it
// sent.
func flushScripts(ctx context.Context, admin *redis.Client, every time.Duration) (stop func() int) {
	done, flushed := make(chan struct{}), make(chan int)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 1; ; n++ {
			admin.ScriptFlush(ctx)
			select {
			case <-done:
				flushed <- n
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { close(done); return <-flushed }
}

func bucketTokens(t *testing.T, c *redis.Client, key string, limit core.Limit) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return -1
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	var units, ts int64
	if _, err := fmt.Sscanf(v, "%d:%d", &units, &ts); err != nil {
		t.Fatalf("bucket %s holds %q: %v", key, v, err)
	}
	p := policyOf(t, "x", limit)
	return units / p.Unit
}

func skipShortFaults(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts, kills and reconfigures redis-server processes")
	}
}

// TestFaultKilledAndRestarted: SIGKILL, then a restart with no data and
// no scripts. While Redis is gone every mode degrades at once (connection
// refused); after the restart the script is loaded again (NOSCRIPT → EVAL)
// and every bucket is full: a restart forgets what subjects had spent.
func TestFaultKilledAndRestarted(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	limit := core.Limit{Rate: 100, Period: time.Hour, Burst: 10}
	ls := faultLimiters(t, srv.Addr(), limit, nil)
	ctx := context.Background()
	faultHealthy(t, ls, "probe")
	for _, fl := range ls {
		for range 7 {
			if res, err := fl.lim.Allow(ctx, "spender"); err != nil || res.Degraded || !res.Allowed {
				t.Fatalf("%v: spending before the kill: %+v, %v", fl.mode, res, err)
			}
		}
		if res, err := fl.lim.AllowN(ctx, "exhausted", limit.Burst); err != nil || !res.Allowed {
			t.Fatalf("%v: exhausting before the kill: %+v, %v", fl.mode, res, err)
		}
		if res, _ := fl.lim.Allow(ctx, "exhausted"); res.Allowed || res.Degraded {
			t.Fatalf("%v: exhausted subject before the kill: %+v; want denied", fl.mode, res)
		}
	}

	srv.Kill()
	stats := faultDuring(t, ls, "k", 800*time.Millisecond, true)
	checkLocalBound(t, limit, stats[core.FailLocal])
	srv.Restart()
	rec := faultRecovery(t, ls, "probe", time.Now())
	logFault(t, "killed (SIGKILL)", stats, rec)

	for _, fl := range ls {
		res, err := fl.lim.Allow(ctx, "spender")
		if err != nil || res.Degraded || !res.Allowed || res.Remaining != limit.Burst-1 {
			t.Errorf("%v: after the restart: %+v, %v; want a full bucket again (allowed, %d left)", fl.mode, res, err, limit.Burst-1)
		}
		// The limiter's denial cache still denies the subject it saw
		// exhausted, until the moment Redis said a token would be back:
		// conservative, never an admission Redis would not have made.
		if res, _ := fl.lim.Allow(ctx, "exhausted"); res.Allowed {
			t.Errorf("%v: cached denial forgotten after the restart: %+v", fl.mode, res)
		}
		o, err := fl.store.Take(ctx, "exhausted", 1, []core.Policy{policyOf(t, fl.lim.Name(), limit)}, nil)
		if err != nil || !o.Allowed || o.Remaining != int64(limit.Burst-1) {
			t.Errorf("%v: exhausted subject in Redis after the restart: %+v, %v; want a full bucket", fl.mode, o, err)
		}
	}
}

// TestFaultClientPause: CLIENT PAUSE holds every command (answered late,
// not lost). Decisions degrade per mode within about Timeout, and recover
// once the pause ends. The held script calls run when it ends, so a call
// whose caller already went degraded may still count.
func TestFaultClientPause(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	limit := core.PerSecond(100)
	ls := faultLimiters(t, srv.Addr(), limit, nil)
	faultHealthy(t, ls, "probe")

	const pause = 1500 * time.Millisecond
	paused := time.Now()
	srv.Pause(pause)
	stats := faultDuring(t, ls, "k", time.Second, true)
	checkLocalBound(t, limit, stats[core.FailLocal])
	rec := faultRecovery(t, ls, "probe", paused.Add(pause))
	logFault(t, "stalled (CLIENT PAUSE)", stats, rec)
}

// TestFaultNeverAnswers: a server that accepts connections and never
// answers (faultproxy Stall), then answers again. TestStalledRedisIsBounded
// checks the bound under concurrency; this adds every mode's recovery.
func TestFaultNeverAnswers(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	p := faultproxy.Start(t, srv.Addr())
	limit := core.PerSecond(100)
	ls := faultLimiters(t, p.Addr(), limit, nil)
	faultHealthy(t, ls, "probe")

	p.SetMode(faultproxy.Stall)
	stats := faultDuring(t, ls, "k", time.Second, true)
	checkLocalBound(t, limit, stats[core.FailLocal])
	p.SetMode(faultproxy.Forward)
	rec := faultRecovery(t, ls, "probe", time.Now())
	logFault(t, "stalled (no answer)", stats, rec)
}

// TestFaultSlowRedis: replies delayed below Config.Timeout cost that delay
// and nothing else; delayed above it, every mode degrades within about
// Timeout (the breaker then stops waiting at all), and recovers once the
// delay goes.
func TestFaultSlowRedis(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	limit := core.PerSecond(100)
	const timeout = 200 * time.Millisecond

	t.Run("below Timeout", func(t *testing.T) {
		p := faultproxy.Start(t, srv.Addr())
		ls := faultLimiters(t, p.Addr(), limit, func(c *core.Config) { c.Timeout = timeout })
		faultHealthy(t, ls, "probe")
		p.SetLatency(20 * time.Millisecond)
		// Redis may allow or deny; it must be Redis that decides.
		stats := faultDuring(t, ls, "k", time.Second, false)
		for m, st := range stats {
			// Zero on a quiet machine; a loaded one may stall a goroutine
			// past the Timeout now and then, which is not what is tested.
			if st.degraded*100 > st.decisions {
				t.Errorf("%v: %d of %d decisions degraded with 20 ms latency and a %v Timeout", m, st.degraded, st.decisions, timeout)
			}
		}
		logFault(t, "slow (20ms < Timeout)", stats, nil)
	})
	t.Run("above Timeout", func(t *testing.T) {
		p := faultproxy.Start(t, srv.Addr())
		ls := faultLimiters(t, p.Addr(), limit, func(c *core.Config) { c.Timeout = timeout / 4 })
		faultHealthy(t, ls, "probe")
		p.SetLatency(300 * time.Millisecond)
		stats := faultDuring(t, ls, "k", time.Second, true)
		checkLocalBound(t, limit, stats[core.FailLocal])
		p.SetLatency(0)
		rec := faultRecovery(t, ls, "probe", time.Now())
		logFault(t, "slow (300ms > Timeout)", stats, rec)
	})
}

// TestFaultScriptFlush: SCRIPT FLUSH empties the script cache (as a
// restart or a failover to a fresh replica does). The next call gets
// NOSCRIPT and loads the script with EVAL; the decision counts exactly once
// — the bucket holds exactly what the decisions said — even with flushes
// racing the decisions.
func TestFaultScriptFlush(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	admin := srv.Client()
	ctx := context.Background()
	// A token an hour: refill never changes a whole-token count here.
	limit := core.Limit{Rate: 1, Period: time.Hour, Burst: 1000}
	ls := faultLimiters(t, srv.Addr(), limit, func(c *core.Config) { c.Timeout = 5 * time.Second })
	for _, fl := range ls {
		t.Run(fl.mode.String(), func(t *testing.T) {
			key := fl.store.Key(fl.lim.Name(), "subject")
			for range 10 {
				if res, _ := fl.lim.Allow(ctx, "subject"); !res.Allowed || res.Degraded {
					t.Fatalf("before the flush: %+v", res)
				}
			}
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := fl.lim.Allow(ctx, "subject")
			if err != nil || res.Degraded || !res.Allowed || res.Remaining != 989 {
				t.Fatalf("first decision after SCRIPT FLUSH: %+v, %v; want a store decision leaving 989", res, err)
			}
			if got := bucketTokens(t, admin, key, limit); got != 989 {
				t.Fatalf("bucket holds %d tokens after the flush, want 989: the decision counted %d times", got, 990-got)
			}

			// Flushes racing decisions: whatever interleaving, the bucket
			// ends holding exactly the tokens never admitted.
			stopFlushing := flushScripts(ctx, admin, 3*time.Millisecond)
			c := limitertest.Flood{Key: "subject", Goroutines: 4, Each: 50}.Run(t, fl.lim)
			n := stopFlushing()
			if c.Degraded != 0 {
				t.Errorf("%d degraded decisions with a 5 s Timeout: NOSCRIPT must be handled, not degrade", c.Degraded)
			}
			want := 989 - c.Admitted
			if got := bucketTokens(t, admin, key, limit); got != want {
				t.Errorf("after %d admitted decisions and %d flushes the bucket holds %d, want %d", c.Admitted, n, got, want)
			}
			t.Logf("fault matrix: %-22s %-6v 200 decisions raced %d SCRIPT FLUSHes: %d admitted, bucket exact, 0 degraded", "SCRIPT FLUSH", fl.mode, n, c.Admitted)
		})
	}
}

// TestFaultReadOnly: the server the client talks to is demoted to a
// replica (REPLICAOF another server of the test's own). Reads still work,
// so the script runs, but its SET fails with READONLY: every allowed
// decision degrades per mode, nothing panics, and decisions recover once it
// is a primary again. A denial writes nothing, so a demoted primary still
// denies correctly from the data it replicated.
func TestFaultReadOnly(t *testing.T) {
	skipShortFaults(t)
	primary := redistest.StartServer(t)
	demoted := redistest.StartServer(t)
	admin := demoted.Client()
	ctx := context.Background()
	limit := core.PerSecond(100)
	ls := faultLimiters(t, demoted.Addr(), limit, nil)
	faultHealthy(t, ls, "probe")

	if err := admin.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "replication link up", func() bool {
		info, _ := admin.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	stats := faultDuring(t, ls, "k", time.Second, true)
	checkLocalBound(t, limit, stats[core.FailLocal])
	for _, fl := range ls {
		if err, _ := fl.last.Load().(error); fl.errs.Load() == 0 || err == nil {
			t.Errorf("%v: no store failure observed", fl.mode)
		} else if !strings.Contains(err.Error(), "READONLY") && !errors.Is(err, core.ErrCircuitOpen) && !errors.Is(err, core.ErrTimeout) {
			t.Errorf("%v: observed cause %v; want READONLY, a timeout or the open breaker", fl.mode, err)
		}
	}
	if err := admin.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	rec := faultRecovery(t, ls, "probe", time.Now())
	logFault(t, "READONLY (demoted)", stats, rec)
}

// TestFaultOOM: Redis at maxmemory with noeviction refuses the script
// with OOM (it may write); every decision degrades per mode, and decisions
// recover once memory is freed.
func TestFaultOOM(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	admin := srv.Client()
	ctx := context.Background()
	limit := core.PerSecond(100)
	ls := faultLimiters(t, srv.Addr(), limit, nil)

	junk := strings.Repeat("x", 8<<10)
	full := false
	for i := 0; i < 2000 && !full; i++ {
		err := admin.Set(ctx, "junk:"+strconv.Itoa(i), junk, 0).Err()
		if err != nil && strings.Contains(err.Error(), "OOM") {
			full = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("Redis never reached maxmemory")
	}
	stats := faultDuring(t, ls, "k", time.Second, true)
	checkLocalBound(t, limit, stats[core.FailLocal])
	for _, fl := range ls {
		if err, _ := fl.last.Load().(error); err == nil || (!strings.Contains(err.Error(), "OOM") && !errors.Is(err, core.ErrCircuitOpen)) {
			t.Errorf("%v: observed cause %v; want OOM or the open breaker", fl.mode, err)
		}
	}
	// The test's own server. At 1 MB the connections' own buffers keep an
	// empty Redis over the limit, so memory is also raised, as an operator
	// would.
	if err := admin.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "16mb").Err(); err != nil {
		t.Fatal(err)
	}
	rec := faultRecovery(t, ls, "probe", time.Now())
	logFault(t, "OOM (noeviction)", stats, rec)
}

// TestFaultEviction: with allkeys-lru and memory pressure, Redis may evict
// a bucket key. An evicted bucket is a full bucket: that subject may be
// admitted up to a whole burst again. Nothing is degraded; nothing fails.
func TestFaultEviction(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	admin := srv.Client()
	ctx := context.Background()
	limit := core.PerHour(5)
	ls := faultLimiters(t, srv.Addr(), limit, nil)
	for _, fl := range ls {
		pol := []core.Policy{policyOf(t, fl.lim.Name(), limit)}
		for i := range 6 {
			o, err := fl.store.Take(ctx, "victim", 1, pol, nil)
			if err != nil || o.Allowed != (i < 5) {
				t.Fatalf("%v: spending the bucket, decision %d: %+v, %v", fl.mode, i+1, o, err)
			}
		}
	}
	junk := strings.Repeat("x", 4<<10)
	evicted := func() bool {
		for _, fl := range ls {
			if admin.Exists(ctx, fl.store.Key(fl.lim.Name(), "victim")).Val() != 0 {
				return false
			}
		}
		return true
	}
	n := 0
	for ; n < 5000 && !evicted(); n++ {
		for j := range 10 {
			if err := admin.Set(ctx, "junk:"+strconv.Itoa(n*10+j), junk, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !evicted() {
		t.Fatal("the buckets were never evicted")
	}
	for _, fl := range ls {
		res, err := fl.lim.Allow(ctx, "victim")
		if err != nil || res.Degraded || !res.Allowed || res.Remaining != 4 {
			t.Errorf("%v: evicted bucket: %+v, %v; want a full bucket (allowed, 4 left)", fl.mode, res, err)
		}
		t.Logf("fault matrix: %-22s %-6v evicted after %d junk keys; exhausted subject admitted again with %d left (a whole burst)", "eviction (allkeys-lru)", fl.mode, n*10, res.Remaining)
	}
}

// TestFaultBadAddressAtStartup: an app configured with a Redis it cannot
// reach must start — New does not dial — and its decisions degrade per
// mode within about Timeout, whatever is wrong with the address: a name
// that does not resolve, a port nobody listens on, something that is not
// Redis, or a peer that never answers. When a Redis appears at the address,
// decisions recover.
func TestFaultBadAddressAtStartup(t *testing.T) {
	skipShortFaults(t)
	gone := redistest.StartServer(t)
	gone.Kill() // its port is now refused
	garbage := listen(t, func(c net.Conn) {
		c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		c.Close()
	})
	silent := listen(t, func(c net.Conn) {
		bufio.NewReader(c).ReadString(0) // read forever, answer nothing
	})
	for _, tc := range []struct{ name, addr string }{
		{"unresolvable", "no-such-host.invalid:6379"},
		{"refused", gone.Addr()},
		{"not Redis", garbage},
		{"never answers", silent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			ls := faultLimiters(t, tc.addr, core.PerSecond(100), nil)
			if d := time.Since(start); d > faultWorstMax {
				t.Errorf("three New calls took %v: New must not dial", d)
			}
			stats := faultDuring(t, ls, "k", 500*time.Millisecond, true)
			logFault(t, "bad address: "+tc.name, stats, nil)
		})
	}
	t.Run("Redis appears", func(t *testing.T) {
		ls := faultLimiters(t, gone.Addr(), core.PerSecond(100), nil)
		stats := faultDuring(t, ls, "k", 300*time.Millisecond, true)
		gone.Restart()
		rec := faultRecovery(t, ls, "probe", time.Now())
		logFault(t, "bad address: refused", stats, rec)
	})
}

// listen serves loopback connections with serve until the test ends and
// returns the address.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFaultStallPastReadTimeoutCountsOnce: a stall longer than the
// client's ReadTimeout. The decision degrades after Timeout; the script call
// it abandoned still runs, and counts, once Redis answers again (DESIGN §3:
// the first call may have counted) — but only once: the client's retries
// need a new connection, whose handshake the stall holds too.
func TestFaultStallPastReadTimeoutCountsOnce(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	admin := srv.Client()
	limit := core.PerHour(10)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	l := limitertest.New(t, core.Config{Store: store, Limit: limit, FailMode: core.FailOpen, Timeout: core.DefaultTimeout})
	ctx := context.Background()
	faultHealthyOne(t, l)
	p.SetMode(faultproxy.Stall)
	if res, _ := l.Allow(ctx, "once"); !res.Degraded {
		t.Fatal("stalled Redis gave a store decision")
	}
	time.Sleep(time.Second) // the client's read timeouts and retries play out
	p.SetMode(faultproxy.Forward)
	key := store.Key(l.Name(), "once")
	waitFor(t, 5*time.Second, "the held script call to run", func() bool { return bucketTokens(t, admin, key, limit) != -1 })
	time.Sleep(200 * time.Millisecond) // a replay would land by now
	got := bucketTokens(t, admin, key, limit)
	t.Logf("fault matrix: one decision abandoned during a stall past ReadTimeout counted %d time(s) when Redis answered", 10-got)
	if got != 9 {
		t.Errorf("one abandoned decision took %d tokens; want 1 (counted, not replayed)", 10-got)
	}
}

// TestFaultConnectionDropCountsOnce: the connection drops after the script
// ran but before its reply arrived (a proxy or failover resetting
// connections). go-redis retries on EOF (MaxRetries, default 3) and sends
// the script again; the script recognises its call id and charges nothing
// twice. With MaxRetries -1 the decision degrades instead, counted once.
func TestFaultConnectionDropCountsOnce(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	admin := srv.Client()
	limit := core.PerHour(10)
	for _, tc := range []struct {
		name       string
		maxRetries int
	}{
		{"client default retries", 0},
		{"client MaxRetries -1", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: tc.maxRetries})
			defer c.Close()
			store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
			l := limitertest.New(t, core.Config{Store: store, Limit: limit, FailMode: core.FailOpen, Timeout: 5 * time.Second})
			faultHealthyOne(t, l)
			p.SetLatency(300 * time.Millisecond) // replies only: the script has run
			go func() {
				time.Sleep(100 * time.Millisecond)
				p.DropAll()
				p.SetLatency(0)
			}()
			res, err := l.Allow(context.Background(), "once")
			key := store.Key(l.Name(), "once")
			got := bucketTokens(t, admin, key, limit)
			t.Logf("fault matrix: connection dropped after the script ran (%s): %+v, %v; counted %d time(s)", tc.name, res, err, 10-got)
			if got != 9 {
				t.Errorf("one decision took %d tokens; want exactly 1", 10-got)
			}
		})
	}
}

// faultHealthyOne waits until l's store decides.
func faultHealthyOne(t *testing.T, l *core.Limiter) {
	t.Helper()
	waitFor(t, faultRecMax, "limiter healthy before the fault", func() bool {
		res, err := l.Allow(context.Background(), "probe")
		return err == nil && !res.Degraded
	})
}
