package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// leaseCallHook is a go-redis hook counting script calls, and the most
// keys one command or pipeline carried.
type leaseCallHook struct {
	calls   atomic.Int64
	maxKeys atomic.Int64
}

func (h *leaseCallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *leaseCallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *leaseCallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		keys := int64(0)
		for _, c := range cmds {
			keys += h.count(c)
		}
		h.noteKeys(keys)
		return next(ctx, cmds)
	}
}

// count counts cmd if it runs a script, and returns its keys.
func (h *leaseCallHook) count(cmd redis.Cmder) int64 {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" {
		return 0
	}
	h.calls.Add(1)
	keys, _ := cmd.Args()[2].(int)
	h.noteKeys(int64(keys))
	return int64(keys)
}

func (h *leaseCallHook) noteKeys(n int64) {
	for {
		old := h.maxKeys.Load()
		if n <= old || h.maxKeys.CompareAndSwap(old, n) {
			return
		}
	}
}

// TestConcurrencyTimeoutFloor: a Timeout no store can meet is refused at
// construction, for every kind of limiter.
func TestConcurrencyTimeoutFloor(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	for _, timeout := range []time.Duration{time.Nanosecond, 999 * time.Microsecond} {
		_, err := core.New(core.Config{Store: store, Limit: core.PerSecond(1), FailMode: core.FailOpen, Timeout: timeout})
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "Timeout") {
			t.Errorf("New with Timeout %v: %v; want ErrInvalidConfig naming Timeout", timeout, err)
		}
		_, err = core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "floor", Max: 1, FailMode: core.FailOpen, Timeout: timeout})
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), "Timeout") {
			t.Errorf("NewConcurrency with Timeout %v: %v; want ErrInvalidConfig naming Timeout", timeout, err)
		}
	}
	if _, err := core.New(core.Config{Store: store, Limit: core.PerSecond(1), FailMode: core.FailOpen, Timeout: time.Millisecond}); err != nil {
		t.Errorf("New with Timeout 1ms: %v", err)
	}
}

// TestTimedOutLogSaysTimeout: a decision degraded because the store did
// not answer within Timeout logs that, with the figure, not "store
// unavailable".
func TestTimedOutLogSaysTimeout(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: stalledServer(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	l, err := core.New(core.Config{Store: core.NewRedisStore(client), Limit: core.PerSecond(1), FailMode: core.FailOpen,
		Timeout: 20 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Allow(context.Background(), "k"); !r.Degraded {
		t.Fatalf("stalled Redis: %+v; want degraded", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "store decision timed out after 20ms") {
		t.Fatalf("log %q; want it to say the decision timed out after 20ms", buf.String())
	}
}

// TestConcurrencyRenewsManyLeases: an instance holding 20 000 leases
// renews them all in one round, in chunks of a bounded size, each its own
// store call, so none is lost; counted in leases and keys per call.
func TestConcurrencyRenewsManyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("acquires 20 000 leases")
	}
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	var calls leaseCallHook
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "many", Max: 1, Lease: time.Hour, Timeout: 5 * time.Second})
	const leases = 20_000
	var wg sync.WaitGroup
	var failed atomic.Int64
	keys := make(chan int, leases)
	for i := range leases {
		keys <- i
	}
	close(keys)
	for range 16 {
		wg.Go(func() {
			for i := range keys {
				l, _, _ := c.Acquire(context.Background(), "k"+strconv.Itoa(i))
				if l == nil {
					failed.Add(1)
					continue
				}
				l.KeepAlive()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d acquires refused", n, leases)
	}
	client.AddHook(&calls)
	core.RenewNow(c)
	if got := core.Kept(c); got != leases {
		t.Fatalf("%d of %d leases still kept after a renewal round: %d lost", got, leases, leases-got)
	}
	if most := calls.maxKeys.Load(); most > 1000 {
		t.Fatalf("a renewal call carried %d leases; want chunks of a bounded size", most)
	}
	t.Logf("%d leases renewed in %d calls of at most %d leases", leases, calls.calls.Load(), calls.maxKeys.Load())
}

// TestConcurrencyLocalLeaseHasItsOwnID: an acquire whose store call
// failed is taken back under the id it sent, whenever that call ends; the
// lease FailLocal then holds must have another id, or the late take-back
// would free it once adopted by the store.
func TestConcurrencyLocalLeaseHasItsOwnID(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	c := mustConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Name: "local", Max: 2, FailMode: core.FailLocal, Instances: 1, Timeout: 2 * time.Second})
	m.Close()
	l, res, _ := core.AcquireWithID(c, context.Background(), "k", "sent")
	if l == nil || !res.Fallback {
		t.Fatalf("Redis down: %+v; want a lease held in process", res)
	}
	if core.LeaseID(l) == "sent" {
		t.Fatal("the lease held in process has the id of the failed store call, which that call takes back")
	}
}

// TestConcurrencyLocalLeasesEndWithOutage: leases FailLocal granted in
// process while Redis was down stop counting beside the store's once it
// answers again: at the first renewal round they are held in the store
// (so other instances see them), or, where the key is full, dropped.
func TestConcurrencyLocalLeasesEndWithOutage(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	store := core.NewRedisStore(client)
	const max = 2
	cfg := core.ConcurrencyConfig{Store: store, Name: "local", Max: max, FailMode: core.FailLocal, Instances: 1, Lease: time.Minute, Timeout: 2 * time.Second}
	c := mustConcurrency(t, cfg)
	other := mustConcurrency(t, cfg) // another instance
	ctx := context.Background()

	m.Close()
	var local []*core.Lease
	for range max {
		l, res, _ := c.Acquire(ctx, "k")
		if l == nil || !res.Fallback {
			t.Fatalf("Redis down: %+v; want a lease held in process", res)
		}
		l.KeepAlive()
		local = append(local, l)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	reachable(t, client)
	core.RenewNow(c) // the store answers: the local leases move there
	admitted := 0
	for range max {
		if l, _, _ := other.Acquire(ctx, "k"); l != nil {
			admitted++
		}
	}
	if admitted != 0 {
		t.Fatalf("after the outage and one renewal round, another instance was admitted %d beside %d leases granted during the outage (Max %d)", admitted, max, max)
	}
	for _, l := range local {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if l, _, _ := other.Acquire(ctx, "k"); l == nil {
		t.Fatal("the adopted leases' releases did not free their slots in the store")
	}

	// A key the store holds full when it answers again: the local lease
	// is dropped, neither renewed nor counted.
	m.Close()
	l, res, _ := c.Acquire(ctx, "full")
	if l == nil || !res.Fallback {
		t.Fatalf("Redis down: %+v; want a lease held in process", res)
	}
	l.KeepAlive()
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	reachable(t, client)
	for range max {
		acquire(t, other, "full", true)
	}
	core.RenewNow(c)
	if got := core.Kept(c); got != 0 {
		t.Fatalf("%d local leases still renewed after the store answered with the key full", got)
	}
}

// reachable waits until client's pool dials the restarted server again:
// after failed dials go-redis refuses new connections for a while (up to
// a second), which is the outage still going on, not what a test checks.
func reachable(t *testing.T, client *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the restarted server answers no PING in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
