package core_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// causes collects the causes the Observer is told.
type causes struct {
	mu   sync.Mutex
	errs []error
}

func (c *causes) add(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *causes) all() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// refusingAddr is a loopback address where nothing listens.
func refusingAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRefusedConnectionReportsDialError (issue 23, item 6): a Redis that
// refuses connections is reported as such (the dial error, kind other in
// metrics), not as "timed out; context deadline exceeded", whether or not
// the client bounds calls by the context. The Timeout is generous: under
// load a 50 ms decision can end before the first dial has failed, and a
// timeout is then the truthful cause.
func TestRefusedConnectionReportsDialError(t *testing.T) {
	t.Parallel()
	for _, bounded := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: refusingAddr(t), ContextTimeoutEnabled: bounded})
		t.Cleanup(func() { c.Close() })
		var got causes
		l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(10), FailMode: core.FailOpen,
			Timeout: 2 * time.Second, Observer: onStoreError(got.add), BreakerFailures: 100})
		for range 3 {
			if r, _ := l.Allow(context.Background(), "k"); !r.Degraded {
				t.Fatalf("ContextTimeoutEnabled %v: %+v; want degraded", bounded, r)
			}
		}
		for _, err := range got.all() {
			if !strings.Contains(err.Error(), "connection refused") || errors.Is(err, core.ErrTimeout) {
				t.Errorf("ContextTimeoutEnabled %v: observed cause %q; want the dial error, not a timeout", bounded, err)
			}
		}
	}
}

// TestClientTimeoutIsTimeout (issue 23, item 6): go-redis's own read
// timeout, shorter than Config.Timeout, is a timeout (kind timeout in
// metrics), not "other".
func TestClientTimeoutIsTimeout(t *testing.T) {
	t.Parallel()
	addr := listen(t, func(c net.Conn) {
		buf := make([]byte, 1<<16)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 20 * time.Millisecond, WriteTimeout: 20 * time.Millisecond,
		MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	var got causes
	l := limitertest.New(t, core.Config{Store: core.NewRedisStore(c), Limit: core.PerSecond(10), FailMode: core.FailOpen,
		Observer: onStoreError(got.add), Timeout: 2 * time.Second, BreakerFailures: 100})
	start := time.Now()
	if r, _ := l.Allow(context.Background(), "k"); !r.Degraded {
		t.Fatalf("%+v; want degraded", r)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("the decision took %v: the client's read timeout did not end it", el)
	}
	errs := got.all()
	if len(errs) != 1 || !errors.Is(errs[0], core.ErrTimeout) {
		t.Fatalf("observed cause %v; want one error matching ErrTimeout", errs)
	}
}
