package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelTimeout bounds forming the Sentinel setup and each failover wait.
const sentinelTimeout = 30 * time.Second

// Sentinel is a Sentinel-managed Redis of the test's own: one primary, one
// replica and three sentinels (quorum 2, down-after 1s, failover-timeout
// 3s), all on loopback ports and stopped when the test ends.
type Sentinel struct {
	t         testing.TB
	name      string
	data      []*Server // primary and replica as started; roles move on failover
	sentinels []*Server
}

// StartSentinel starts the setup and returns once the replica is in sync
// and every sentinel knows the primary, the replica and the two other
// sentinels, so a failover can happen. It takes a few seconds, so it skips
// under -short.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: a Sentinel setup takes seconds to form; skipped with -short")
	}
	s := &Sentinel{t: t, name: "mymaster"}
	primary := StartServer(t)
	replica := StartServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	s.data = []*Server{primary, replica}

	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	// Sentinels learn replicas from the primary's INFO, which they read at
	// once and then only every 10s: the replica must be attached first.
	s.poll(ctx, replica.Addr(), "replica in sync", func(c *redis.Client) (bool, string, error) {
		info, err := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up"), info, err
	})
	for range 3 {
		s.sentinels = append(s.sentinels, startServer(t, func(port int, dir string) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[4]s 1000
sentinel failover-timeout %[4]s 3000
sentinel parallel-syncs %[4]s 1
`, port, dir, filepath.Join(dir, "redis.log"), s.name, primary.Port())
			// The sentinel rewrites its file: it must be writable and its own.
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		}))
	}
	for _, sn := range s.sentinels {
		s.poll(ctx, sn.Addr(), "sentinel knows the setup", func(c *redis.Client) (bool, string, error) {
			m, err := c.Do(ctx, "SENTINEL", "MASTER", s.name).Result()
			if err != nil {
				return false, "", err
			}
			f := fields(m)
			ok := f["flags"] == "master" && f["num-slaves"] == "1" && f["num-other-sentinels"] == "2"
			return ok, fmt.Sprint(f), nil
		})
	}
	return s
}

// poll calls check with a client of addr until it reports done, failing
// the test when ctx ends first.
func (s *Sentinel) poll(ctx context.Context, addr, what string, check func(*redis.Client) (bool, string, error)) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var last string
	for {
		done, state, err := check(c)
		if err == nil && done {
			return
		}
		last = state
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("redistest: sentinel setup: %s at %s: not within %v; last: %s", what, addr, sentinelTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fields turns a RESP2 flat array or RESP3 map of field names and values
// into a map.
func fields(v any) map[string]string {
	f := map[string]string{}
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			f[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return f
}

// MasterName returns the name the sentinels monitor the primary under.
func (s *Sentinel) MasterName() string { return s.name }

// SentinelAddrs returns the three sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes.
func (s *Sentinel) Sentinels() []*Server { return s.sentinels }

// DataServers returns the primary and the replica as started; after a
// failover their roles differ.
func (s *Sentinel) DataServers() []*Server { return s.data }

// FailoverOptions returns go-redis failover options for this setup, for
// tests that want to change timeouts or retries before making a client.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs()}
}

// FailoverClient returns a new client that follows the primary through the
// sentinels (redis.NewFailoverClient), closed when the test ends.
func (s *Sentinel) FailoverClient() *redis.Client {
	c := redis.NewFailoverClient(s.FailoverOptions())
	s.t.Cleanup(func() { c.Close() })
	return c
}

// PrimaryAddr returns the primary's address as the first answering
// sentinel reports it.
func (s *Sentinel) PrimaryAddr() string {
	s.t.Helper()
	var last error
	for _, sn := range s.sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hp, err := c.GetMasterAddrByName(ctx, s.name).Result()
		cancel()
		c.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1]
		}
		last = err
	}
	s.t.Fatalf("redistest: no sentinel names the primary: %v", last)
	return ""
}

// KillPrimary kills the current primary with SIGKILL and returns its
// address. The sentinels promote the replica about 1–5s later; see
// WaitFailover.
func (s *Sentinel) KillPrimary() string {
	s.t.Helper()
	addr := s.PrimaryAddr()
	for _, d := range s.data {
		if d.Addr() == addr {
			d.Kill()
			return addr
		}
	}
	s.t.Fatalf("redistest: the sentinels' primary %s is none of this setup's servers", addr)
	return ""
}

// WaitFailover waits until every sentinel names a primary other than old
// and that server answers as a primary, and returns its address.
func (s *Sentinel) WaitFailover(old string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	var primary string
	for _, sn := range s.sentinels {
		s.poll(ctx, sn.Addr(), "failover away from "+old, func(c *redis.Client) (bool, string, error) {
			hp, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.name).StringSlice()
			if err != nil || len(hp) != 2 {
				return false, fmt.Sprint(hp), err
			}
			primary = hp[0] + ":" + hp[1]
			return primary != old, primary, nil
		})
	}
	s.poll(ctx, primary, "promoted replica answers as primary", func(c *redis.Client) (bool, string, error) {
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 {
			return false, fmt.Sprint(role), err
		}
		return role[0] == "master", fmt.Sprint(role[0]), nil
	})
	return primary
}
