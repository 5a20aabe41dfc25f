package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server process of our own, so that INFO counts
// only what the benchmark sends and nobody else's tests share its CPU.
type RedisServer struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// StartRedis starts redis-server (from PATH) on a free loopback port,
// without persistence, and waits until it answers.
func StartRedis() (*RedisServer, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	dir, err := os.MkdirTemp("", "ratelimit-bench-redis")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxclients", "10000")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: starting redis-server: %w", err)
	}
	s := &RedisServer{Addr: addr, cmd: cmd, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
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
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}
