package core_test

import (
	"context"
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

// scriptCalls is a go-redis hook that counts the decision-script calls a
// client makes (its own retries, below the hook, are not counted) and runs
// onBatch, once, when a call deciding more than one request goes out.
type scriptCalls struct {
	calls   atomic.Int64
	once    sync.Once
	onBatch func(decisions int64)
}

func (*scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := batchScriptDecisions(cmd); n > 0 {
			s.calls.Add(1)
			if n > 1 {
				s.once.Do(func() { s.onBatch(n) })
			}
		}
		return next(ctx, cmd)
	}
}

func (*scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// commandCount returns how many times a server has run cmd (INFO
// commandstats).
func commandCount(c *redis.Client, cmd string) (int, error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n, nil
		}
	}
	return 0, nil
}

// TestBatchResentChargedOnce (issue 18, item 5): the connection of a
// batched script call drops after the script ran and before its reply
// arrived; go-redis (default MaxRetries) sends the same call again on a new
// connection. The script finds the call's replay record and takes nothing
// again: every decision of the batch, over both of its limits, is charged
// exactly once, and its callers get the answers of the first run: allowed.
// Before the redesign a re-sent decision was counted up to 4 times.
func TestBatchResentChargedOnce(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	admin := srv.Client()
	p := faultproxy.Start(t, srv.Addr())
	// go-redis defaults (MaxRetries 3), but one connection, so that the
	// callers queue behind a call in flight and leave together.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1})
	defer c.Close()
	hour := core.PerHour(10)
	day := core.Limit{Rate: 100, Period: 24 * time.Hour, Burst: 100}
	var dropped atomic.Int64 // decisions in the call whose connection dropped
	var base atomic.Int64    // the server's EVALSHA count before the batch
	hook := &scriptCalls{onBatch: func(n int64) {
		dropped.Store(n)
		// The calls before this one have run (one connection): count
		// from here, not from before the callers started.
		before, _ := commandCount(admin, "evalsha")
		go func() {
			// Once the script has run (its reply is held back), drop.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if ran, err := commandCount(admin, "evalsha"); err == nil && ran > before {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			p.DropAll()
			p.SetLatency(0)
		}()
	}}
	c.AddHook(hook)
	store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
	l := limitertest.New(t, core.Config{
		Store: store, Limit: hour, Name: "hour", Extra: []core.NamedLimit{{Name: "day", Limit: day}},
		FailMode: core.FailOpen, Timeout: 5 * time.Second,
	})
	faultHealthyOne(t, l) // loads the script: no NOSCRIPT below
	before, err := commandCount(admin, "evalsha")
	if err != nil {
		t.Fatal(err)
	}
	base.Store(int64(before))
	calls := hook.calls.Load()

	// Replies take 1 s (time for the drop to come first on a loaded
	// machine), so concurrent callers queue behind a call in
	// flight and leave together, in one script call.
	p.SetLatency(time.Second)
	const n = 12
	results := make([]core.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := l.Allow(context.Background(), "resent-"+strconv.Itoa(i))
			if err != nil {
				t.Errorf("Allow: %v", err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	p.SetLatency(0)

	after, err := commandCount(admin, "evalsha")
	if err != nil {
		t.Fatal(err)
	}
	ran := after - before
	sent := int(hook.calls.Load() - calls)
	if dropped.Load() == 0 {
		t.Fatal("no script call decided more than one request: no batch to drop")
	}
	if ran <= sent {
		t.Fatalf("Redis ran the script %d times for %d calls: the dropped call was not re-sent", ran, sent)
	}
	var allowed, denied, degraded int
	var denial core.Result
	for i, res := range results {
		switch {
		case res.Degraded:
			degraded++
		case res.Allowed:
			allowed++
		default:
			denied++
			denial = res
		}
		subject := "resent-" + strconv.Itoa(i)
		for _, lim := range []core.NamedLimit{{Name: "hour", Limit: hour}, {Name: "day", Limit: day}} {
			got := bucketTokens(t, admin, store.Key(lim.Name, subject), lim.Limit)
			if want := int64(lim.Limit.Burst - 1); got != want {
				t.Errorf("%s, limit %s: %d tokens left, want %d: one decision charged %d times", subject, lim.Name, got, want, int64(lim.Limit.Burst)-got)
			}
		}
	}
	t.Logf("fault matrix: %-22s %d decisions in %d calls, %d calls run by Redis (the dropped one decided %d); "+
		"every decision charged once; answered %d allowed, %d denied (the re-sent batch: Remaining %d, RetryAfter %v), %d degraded",
		"batch re-sent (EOF)", n, sent, ran, dropped.Load(), allowed, denied, denial.Remaining, denial.RetryAfter, degraded)
	if degraded != 0 || allowed != n {
		t.Errorf("%d allowed, %d denied, %d degraded; want all %d allowed: the re-send gets the answers of the first run", allowed, denied, degraded, n)
	}
}
