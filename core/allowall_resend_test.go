package core_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/faultproxy"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// dropOnce is a go-redis hook that, once armed, lets skip script calls
// whose keys hold mark pass, then drops the reply of the next one through
// p once Redis ran it (the admin client counts EVALSHA), so that go-redis
// sends it again.
type dropOnce struct {
	p       *faultproxy.Proxy
	admin   *redis.Client
	mark    string
	armed   atomic.Bool
	skip    atomic.Int64
	dropped atomic.Bool
}

func (*dropOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*dropOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *dropOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d.armed.Load() && batchScriptDecisions(cmd) > 0 && strings.Contains(cmd.String(), d.mark) && d.skip.Add(-1) < 0 && d.dropped.CompareAndSwap(false, true) {
			before, _ := commandCount(d.admin, "evalsha")
			d.p.SetLatency(time.Second) // the reply is held back
			go func() {
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if ran, err := commandCount(d.admin, "evalsha"); err == nil && ran > before {
						break
					}
				}
				d.p.DropAll()
				d.p.SetLatency(0)
			}()
		}
		return next(ctx, cmd)
	}
}

// TestAllowAllResentChargedOnce: the reply of AllowAll's one script call
// (three checks, three subjects) is lost after the script ran; go-redis
// sends it again; the script's replay record answers: every check
// charged once, the whole allowed.
func TestAllowAllResentChargedOnce(t *testing.T) {
	skipShortFaults(t)
	srv := redistest.StartServer(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr()}) // MaxRetries: the default, 3
	defer c.Close()
	prefix := redistest.Prefix(t)
	hook := &dropOnce{p: p, admin: srv.Client(), mark: prefix}
	c.AddHook(hook)
	store := core.NewRedisStore(c, core.WithPrefix(prefix))
	var ls []*core.Limiter
	for i, lim := range []core.Limit{core.PerHour(10), core.PerHour(20), core.PerHour(30)} {
		ls = append(ls, limitertest.New(t, core.Config{Store: store, Name: "l" + strconv.Itoa(i), Limit: lim,
			FailMode: core.FailOpen, Timeout: 10 * time.Second}))
	}
	faultHealthyOne(t, ls[0])
	hook.armed.Store(true)
	first, rs, err := core.AllowAll(context.Background(),
		core.Check{ls[0], "a", 1}, core.Check{ls[1], "b", 2}, core.Check{ls[2], "c", 3})
	if err != nil || !first.Allowed || first.Degraded || !hook.dropped.Load() {
		t.Fatalf("AllowAll: %+v %+v %v (dropped %v)", first, rs, err, hook.dropped.Load())
	}
	admin := srv.Client()
	for i, want := range []int64{9, 18, 27} {
		if got := bucketTokens(t, admin, store.Key(ls[i].Name(), string(rune('a'+i))), ls[i].Limit()); got != want {
			t.Errorf("check %d: %d tokens left, want %d: charged %d times", i, got, want, (ls[i].Limit().Burst-int(got))/(i+1))
		}
	}
}

// TestAllowAllGiveBackOnce: on a Ring of two shards, one shard refuses
// while the other took; the give-back's reply is lost after it ran and
// go-redis sends it again: it is given back once, not twice (a second
// give-back would hand out tokens never taken... capped at the burst, so
// the test takes some first).
func TestAllowAllGiveBackOnce(t *testing.T) {
	skipShortFaults(t)
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	p := faultproxy.Start(t, b.Addr())
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": p.Addr()}})
	defer ring.Close()
	prefix := redistest.Prefix(t)
	ka, kb := keyOnShard(ring, a.Addr()), keyOnShard(ring, p.Addr())
	hook := &dropOnce{p: p, admin: b.Client(), mark: "{" + kb + "}"}
	ring.AddHook(hook)
	store := core.NewRedisStore(ring, core.WithPrefix(prefix))
	mk := func(name string, lim core.Limit) *core.Limiter {
		return limitertest.New(t, core.Config{Store: store, Name: name, Limit: lim, FailMode: core.FailClosed,
			Timeout: 10 * time.Second, DenyCacheSize: -1})
	}
	la, lb := mk("a", core.PerHour(1)), mk("b", core.PerHour(10))
	ctx := context.Background()
	for _, c := range []core.Check{{la, ka, 1}, {lb, kb, 4}} { // a empty, b at 6
		if first, _, err := core.AllowAll(ctx, c); err != nil || !first.Allowed {
			t.Fatalf("%+v %v", first, err)
		}
	}
	hook.skip.Store(1) // the take on b passes; its give-back's reply is lost
	hook.armed.Store(true)
	before, _ := commandCount(b.Client(), "evalsha")
	first, rs, err := core.AllowAll(ctx, core.Check{la, ka, 1}, core.Check{lb, kb, 3})
	if err != nil || first.Allowed || first.Name != "a" || !rs[1].Allowed || rs[1].Degraded || !hook.dropped.Load() {
		t.Fatalf("AllowAll: %+v %+v %v (dropped %v)", first, rs, err, hook.dropped.Load())
	}
	if ran, _ := commandCount(b.Client(), "evalsha"); ran-before != 3 {
		t.Errorf("b ran %d script calls; want 3: the take, the give-back and its re-send", ran-before)
	}
	if rs[1].Remaining != 6 {
		t.Errorf("b's Result: %d left; want 6, untouched", rs[1].Remaining)
	}
	if got := bucketTokens(t, b.Client(), store.Key("b", kb), lb.Limit()); got != 6 {
		t.Errorf("b: %d tokens after the give-back; want 6 (given back %d times)", got, (int(got)-3)/3)
	}
}

// keyOnShard returns a key that ring sends to its shard at addr.
func keyOnShard(ring *redis.Ring, addr string) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if c, err := ring.GetShardClientForKey(k); err == nil && c.Options().Addr == addr {
			return k
		}
	}
}

// TestAllowAllFailedNode: on a Ring whose shard b is down, b's checks are
// decided by their FailModes and a's by Redis: allowed as a whole when
// every check is (a took), refused when one refuses (a gave it back).
// FailOpen's blind answer never binds over a check decided.
func TestAllowAllFailedNode(t *testing.T) {
	skipShortFaults(t)
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	p := faultproxy.Start(t, b.Addr())
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": p.Addr()}, HeartbeatFrequency: time.Hour})
	defer ring.Close()
	ka, kb := keyOnShard(ring, a.Addr()), keyOnShard(ring, p.Addr())
	store := core.NewRedisStore(ring, core.WithPrefix(redistest.Prefix(t)))
	mk := func(name string, mode core.FailMode) *core.Limiter {
		return limitertest.New(t, core.Config{Store: store, Name: name, Limit: core.PerHour(10), FailMode: mode,
			Timeout: 3 * time.Second, DenyCacheSize: -1, BreakerFailures: 1000})
	}
	x, open, closed := mk("x", core.FailClosed), mk("open", core.FailOpen), mk("closed", core.FailClosed)
	ctx := context.Background()
	faultHealthyOne(t, x)
	p.SetMode(faultproxy.Refuse)
	first, rs, err := core.AllowAll(ctx, core.Check{x, ka, 2}, core.Check{open, kb, 1})
	if err != nil || !first.Allowed || !first.Degraded || rs[0].Degraded || rs[0].Remaining != 8 || !rs[1].Degraded || !rs[1].Allowed {
		t.Fatalf("a's check and FailOpen's on the failed shard: %+v %+v %v", first, rs, err)
	}
	// FailOpen's blind Allowed (Remaining 0) knows nothing of its limit:
	// the binding Result is x's, the one decided.
	if first.Name != "x" || first.Remaining != 8 {
		t.Errorf("binding result %+v; want x's (8 left), not FailOpen's blind answer", first)
	}
	first, rs, err = core.AllowAll(ctx, core.Check{x, ka, 2}, core.Check{closed, kb, 1})
	if err != nil || first.Allowed || first.Name != "closed" || !first.Degraded || !rs[0].Allowed || rs[0].Degraded || rs[0].Remaining != 8 {
		t.Fatalf("a's check and FailClosed's on the failed shard: %+v %+v %v", first, rs, err)
	}
	if got := bucketTokens(t, a.Client(), store.Key("x", ka), x.Limit()); got != 8 {
		t.Errorf("x: %d tokens; want 8: the refused whole gave back what a took", got)
	}
	// Redis refuses x's check: it binds, and the whole is Degraded since
	// open's check is.
	first, rs, err = core.AllowAll(ctx, core.Check{x, ka, 9}, core.Check{open, kb, 1})
	if err != nil || first.Allowed || first.Name != "x" || !first.Degraded || rs[0].Degraded || !rs[1].Degraded {
		t.Fatalf("x refuses, open's shard failed: %+v %+v %v", first, rs, err)
	}
}
