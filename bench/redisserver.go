package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server process of our own, so that INFO counts
// only what the benchmark sends and nobody else's tests share its CPU. On
// Linux it dies with this process.
type RedisServer struct {
	Addr   string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{} // closed when the process has exited
}

// StartRedis starts redis-server (from PATH) on a free loopback port,
// without persistence, and waits until it answers.
func StartRedis() (*RedisServer, error) {
	return startServer(func() (string, error) { return FreeAddr() })
}

// startServer starts redis-server on an address from pick, with extra
// arguments after the defaults, and waits until it answers PING; when the
// server exits first (another process took the port), it tries another.
func startServer(pick func() (string, error), extra ...string) (*RedisServer, error) {
	var last error
	for range 5 {
		addr, err := pick()
		if err != nil {
			return nil, err
		}
		s, err := startAt(addr, extra)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

var errExited = errors.New("exited before answering")

func startAt(addr string, extra []string) (*RedisServer, error) {
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	dir, err := os.MkdirTemp("", "ratelimit-bench-redis")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxclients", "10000",
		"--logfile", dir + "/redis.log"}, extra...)
	cmd := exec.Command("redis-server", args...)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: starting redis-server: %w", err)
	}
	s := &RedisServer{Addr: addr, cmd: cmd, dir: dir, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			s.Stop()
			return nil, fmt.Errorf("bench: redis-server on %s %w", addr, errExited)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("bench: redis-server on %s did not answer", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server and removes its directory.
func (s *RedisServer) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.dir)
}

// clusterPort returns a loopback address whose port and cluster bus port
// (port+10000) are both free, from [10000, 22000): below Linux's default
// ephemeral range, so that no outgoing connection holds either.
func clusterPort() (string, error) {
	for range 200 {
		p := 10000 + rand.IntN(12000)
		if canListen(p) && canListen(p+10000) {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
		}
	}
	return "", errors.New("bench: no free loopback port pair (p, p+10000) in [10000, 22000)")
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// RedisCluster is a Redis Cluster of our own: primaries only, one
// redis-server each, on this machine.
type RedisCluster struct {
	Nodes []*RedisServer
}

// StartCluster starts n primaries (at least 3) with --cluster-enabled yes,
// joins them with redis-cli --cluster create --cluster-replicas 0, and
// returns once every node reports cluster_state:ok with all slots assigned
// and every node known.
func StartCluster(n int) (*RedisCluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("bench: a Redis Cluster needs 3 primaries, not %d", n)
	}
	c := &RedisCluster{}
	for range n {
		s, err := startServer(clusterPort, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("bench: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(n)}
	for _, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && containsAll(info, want) {
				break
			}
			if ctx.Err() != nil {
				cl.Close()
				c.Stop()
				return nil, fmt.Errorf("bench: cluster node %s not ready; last CLUSTER INFO: %q (%v)", s.Addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return c, nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Addrs are the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr
	}
	return a
}

// Stop ends every node.
func (c *RedisCluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}
