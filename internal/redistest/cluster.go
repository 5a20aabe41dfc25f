package redistest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds creating a cluster and waiting for it to agree.
const clusterTimeout = 60 * time.Second

// Cluster is a Redis Cluster of the test's own: every node a Server on a
// loopback port (its bus on port+10000), stopped when the test ends.
type Cluster struct {
	t         testing.TB
	nodes     []*Server
	primaries int
}

// StartCluster starts primaries primary nodes (at least 3) and
// replicasPerPrimary replicas of each, joins them with
// redis-cli --cluster create, and returns once every node reports
// cluster_state:ok, knows every other node and, for replicas, is in sync
// with its primary. Every node gets args after the defaults, which they
// override (for example "--cluster-node-timeout", "1000" for a faster
// failover than the default 2000 ms). It takes a few seconds, so it skips
// under -short.
func StartCluster(t testing.TB, primaries, replicasPerPrimary int, args ...string) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: a Redis Cluster takes seconds to form; skipped with -short")
	}
	if primaries < 3 || replicasPerPrimary < 0 {
		t.Fatalf("redistest: StartCluster(%d, %d): Redis Cluster needs at least 3 primaries", primaries, replicasPerPrimary)
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t, primaries: primaries}
	n := primaries * (1 + replicasPerPrimary)
	for range n {
		c.nodes = append(c.nodes, startServer(t, func(port int, dir string) ([]string, error) {
			return append(append(serverArgs(port, dir),
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000",
				// Tests see an unreachable slot as an error at once, and a
				// node never stops answering because another is gone.
				"--cluster-require-full-coverage", "no",
			), args...), nil
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicasPerPrimary), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	c.waitReady(ctx, n, replicasPerPrimary > 0)
	return c
}

// waitReady polls every node until the cluster is formed as seen from each.
func (c *Cluster) waitReady(ctx context.Context, n int, replicas bool) {
	c.t.Helper()
	want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(n)}
	for _, s := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		var last string
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			last = info
			if err == nil && containsAll(info, want) {
				if !replicas {
					break
				}
				repl, err := cl.Info(ctx, "replication").Result()
				last = repl
				if err == nil && (strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) {
					break
				}
			}
			if ctx.Err() != nil {
				cl.Close()
				c.t.Fatalf("redistest: cluster node %s not ready within %v; last reply:\n%s", s.Addr(), clusterTimeout, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Addrs returns every node's address, primaries first as created (roles
// change only if a test makes them).
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns every node, primaries first as created.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Primaries returns the nodes created as primaries.
func (c *Cluster) Primaries() []*Server { return c.nodes[:c.primaries] }

// Options returns cluster client options for this cluster, for tests that
// need a client of their own making.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(c.Options())
	c.t.Cleanup(func() { cl.Close() })
	return cl
}
