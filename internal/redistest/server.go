package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server of a test's own may take to answer
// PING after it starts: generous, for loaded CI machines.
const startTimeout = 15 * time.Second

// Server is a redis-server process of one test's own on a free loopback
// port, with its own temporary directory and no persistence (--save ""
// --appendonly no); replicas of it sync without delay. It is killed, and
// its directory removed, when the test ends, whether it passed or not; on
// Linux it also dies with the test binary. Kill, Stall and Resume may be
// called from any goroutine; methods that can fail the test (Restart,
// Pause) only from the test's goroutine.
type Server struct {
	t    testing.TB
	port int
	dir  string
	args func(port int) ([]string, error) // redis-server's arguments

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServer starts a standalone redis-server for t, passing args (for
// example "--maxmemory", "1mb") after the defaults, and returns once it
// answers PING. When redis-server is not on PATH it calls Unavailable.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, func(port int, dir string) ([]string, error) {
		return append(serverArgs(port, dir), args...), nil
	})
}

// serverArgs are the command-line arguments every data server starts with.
func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		// Replicas sync at once, not after the default 5s wait for more.
		"--repl-diskless-sync-delay", "0",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
	}
}

// startServer starts redis-server with the arguments mk returns for a free
// port, trying other ports when another process takes the chosen one first.
func startServer(t testing.TB, mk func(port int, dir string) ([]string, error)) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	dir := t.TempDir() // removed after the cleanup below has killed the server
	s := &Server{t: t, dir: dir}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			s.logTail(20)
		}
	})
	var err error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			break
		}
		s.args = func(port int) ([]string, error) { return mk(port, dir) }
		if err = s.launch(bin); err == nil {
			return s
		}
		if !s.bindFailed() {
			break
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// lookPath finds a Redis binary, or makes t skip (or fail when Redis is
// required) without it.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "%s is not on PATH: install Redis to run this test", name)
	}
	return p
}

// launch starts the process and waits until it answers PING.
func (s *Server) launch(bin string) error {
	args, err := s.args(s.port)
	if err != nil {
		return err
	}
	// A fresh log per start, so bindFailed reads only this start's lines.
	_ = os.Rename(filepath.Join(s.dir, "redis.log"), filepath.Join(s.dir, "redis.log.prev"))
	out, err := os.Create(filepath.Join(s.dir, "stdout.log"))
	if err != nil {
		return err
	}
	defer out.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server %s exited at start: %s", s.Addr(), s.lastLines(5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server %s did not answer PING within %v: %v", s.Addr(), startTimeout, err)
		}
	}
}

// bindFailed reports whether the last start failed because the port (or
// its cluster bus port) was taken.
func (s *Server) bindFailed() bool {
	return bytes.Contains([]byte(s.lastLines(20)), []byte("in use"))
}

// lastLines returns the last n lines of the server's log and output.
func (s *Server) lastLines(n int) string {
	var all []byte
	for _, f := range []string{"stdout.log", "redis.log"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, f))
		all = append(all, b...)
	}
	lines := bytes.Split(bytes.TrimSpace(all), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func (s *Server) logTail(n int) {
	s.t.Logf("redistest: last lines of redis-server %s's log:\n%s", s.Addr(), s.lastLines(n))
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Running reports whether the process is alive (stalled counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Kill stops the server with SIGKILL, as a crash would, and waits for the
// process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart kills the server if it runs and starts it again on the same port
// with the same arguments and no data (nothing is persisted). A cluster
// node keeps its nodes.conf, so it rejoins its cluster.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	deadline := time.Now().Add(startTimeout)
	for {
		if err = s.launch(lookPath(s.t, "redis-server")); err == nil || !s.bindFailed() || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the port is busy; its last user may still be closing it
	}
	if err != nil {
		s.t.Fatalf("redistest: restarting redis-server %s: %v", s.Addr(), err)
	}
}

// Stall freezes the process with SIGSTOP: connections stay open and
// commands are accepted but never answered, as with a hung server or a
// network partition. Resume undoes it; Kill works on a stalled server.
func (s *Server) Stall() { s.signal(syscall.SIGSTOP) }

// Resume lets a stalled server run again.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Pause makes the server hold every client's commands for d (CLIENT PAUSE
// ALL): they are answered late, not lost. Only ever on a server of the
// test's own — never on the shared one.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ClientPause(ctx, d).Err(); err != nil {
		s.t.Fatalf("redistest: CLIENT PAUSE on %s: %v", s.Addr(), err)
	}
}
