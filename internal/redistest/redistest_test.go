package redistest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/redistest"
)

func TestStartServerKillRestartStall(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a redis-server process")
	}
	s := redistest.StartServer(t, "--maxmemory", "8mb")
	c := s.Client()
	// A client that neither retries nor waits past its context, so checks
	// of a dead or stalled server take no longer than they must.
	quick := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer quick.Close()
	ctx := context.Background()
	if got, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "8388608" {
		t.Fatalf("extra argument not applied: %v, %v", got, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if err := quick.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}

	port := s.Port()
	s.Restart()
	if s.Port() != port {
		t.Fatalf("Restart moved the port: %d, want %d", s.Port(), port)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Restart: EXISTS k = %d, %v; want 0 (empty data)", n, err)
	}

	s.Stall()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := quick.Ping(short).Err()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("PING of a stalled server: %v, want a timeout", err)
	}
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	s.Pause(300 * time.Millisecond)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("PING during CLIENT PAUSE answered after %v; want it held", d)
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

func TestStartCluster(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t, 3, 1)
	t.Logf("6-node cluster ready in %v", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	if got := len(c.Addrs()); got != 6 {
		t.Fatalf("len(Addrs()) = %d, want 6", got)
	}
	for i, s := range c.Nodes() {
		role, err := s.Client().Do(ctx, "ROLE").Slice()
		if err != nil {
			t.Fatal(err)
		}
		want := "slave"
		if i < len(c.Primaries()) {
			want = "master"
		}
		if role[0] != want {
			t.Errorf("node %d (%s) is %v, want %s", i, s.Addr(), role[0], want)
		}
	}
	cl := c.Client()
	masters := map[string]bool{}
	for i := range 300 {
		key := "{" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "}k"
		if err := cl.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		shard, err := cl.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[shard.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("keys landed on %d primaries, want 3", len(masters))
	}
}

func TestStartSentinelFailover(t *testing.T) {
	start := time.Now()
	s := redistest.StartSentinel(t)
	t.Logf("sentinel setup ready in %v", time.Since(start).Round(time.Millisecond))
	if len(s.SentinelAddrs()) != 3 || s.MasterName() == "" {
		t.Fatalf("SentinelAddrs() = %v, MasterName() = %q", s.SentinelAddrs(), s.MasterName())
	}
	c := s.FailoverClient()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.PrimaryAddr()
	killed := s.KillPrimary()
	if killed != old {
		t.Fatalf("KillPrimary killed %s, primary was %s", killed, old)
	}
	start = time.Now()
	now := s.WaitFailover(old)
	t.Logf("failover %s -> %s in %v", old, now, time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Set(ctx, "k2", "v", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failover client still failing after failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Errorf("GET k after failover = %q, want the replicated %q", got, "v")
	}
}

// TestPrefixCleanup: the keys a test writes under its Prefix on the shared
// server are gone when it ends, whatever their TTL.
func TestPrefixCleanup(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	var prefix string
	t.Run("writer", func(t *testing.T) {
		prefix = redistest.Prefix(t)
		for i := range 2500 { // more than one SCAN batch
			if err := c.Set(ctx, prefix+"{k}:"+strconv.Itoa(i), "v", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	left, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("%d keys under %s left after the test ended, want 0", len(left), prefix)
	}
}
