package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// deadRedis returns a store on an address where nothing listens: every
// call fails at once (connection refused).
func deadRedis(t *testing.T) *core.RedisStore {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	return core.NewRedisStore(client)
}

// deadLimiter returns a FailOpen limiter named name on store (deadRedis),
// observed by o, logging to logger. Its BreakerCooldown is longer than a
// test: the breaker stays open once opened.
func deadLimiter(t *testing.T, store *core.RedisStore, name string, o core.Observer, logger *slog.Logger) *core.Limiter {
	return limitertest.New(t, core.Config{Store: store, Name: name, Limit: core.PerSecond(10), FailMode: core.FailOpen,
		Timeout: time.Second, BreakerCooldown: time.Second, Observer: o, Logger: logger})
}

// lockedBuffer is a log sink shared by several limiters' loggers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.b.String(), s)
}

// TestOneOpeningPerNode (DESIGN §4, issue 44): the breakers are the
// store's. Two limiters and a Concurrency on one store whose node is
// dead open one breaker, once: one BreakerChange to one Observer, one log
// line, and the decisions of the others are then refused without a call
// (ErrCircuitOpen), although their own calls never tripped it.
func TestOneOpeningPerNode(t *testing.T) {
	t.Parallel()
	store := deadRedis(t)
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var oa, ob, oc leaseObserver
	a, b := deadLimiter(t, store, "a", &oa, logger), deadLimiter(t, store, "b", &ob, logger)
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: store, Name: "c", Max: 2, FailMode: core.FailOpen,
		Timeout: time.Second, BreakerCooldown: time.Second, Observer: &oc, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		a.Allow(ctx, "k")
		b.Allow(ctx, "k")
		c.Acquire(ctx, "k")
	}
	changes := func(o *leaseObserver) []bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return append([]bool(nil), o.breakers...)
	}
	ca, cb, cc := changes(&oa), changes(&ob), changes(&oc)
	if n := len(ca) + len(cb) + len(cc); n != 1 {
		t.Errorf("breaker changes a %v, b %v, c %v; want one opening for the store's one node", ca, cb, cc)
	}
	if n := logs.count("circuit breaker open"); n != 1 {
		t.Errorf("%d log lines of an opening; want 1:\n%s", n, logs.b.String())
	}
	for name, o := range map[string]*leaseObserver{"a": &oa, "b": &ob, "c": &oc} {
		o.mu.Lock()
		last := o.events[len(o.events)-1]
		o.mu.Unlock()
		if !last.Degraded || !errors.Is(last.Err, core.ErrCircuitOpen) {
			t.Errorf("%s's last decision: %+v; want degraded by the open breaker", name, last)
		}
	}
}

// TestAllowAllMeetsTheNodesBreaker (issue 41): a decision across keys is
// guarded by the breaker of the node it asks, whichever limiter's check
// comes first: b's breaker is a's, which a's failures opened.
func TestAllowAllMeetsTheNodesBreaker(t *testing.T) {
	t.Parallel()
	store := deadRedis(t)
	logger := slog.New(slog.DiscardHandler)
	var oa, ob leaseObserver
	a, b := deadLimiter(t, store, "a", &oa, logger), deadLimiter(t, store, "b", &ob, logger)
	ctx := context.Background()
	for range 10 {
		a.Allow(ctx, "k")
	}
	if _, _, err := core.AllowAll(ctx, core.Check{Limiter: b, Key: "k", N: 1}, core.Check{Limiter: a, Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.events) == 0 || !errors.Is(ob.events[len(ob.events)-1].Err, core.ErrCircuitOpen) {
		t.Fatalf("b's checks in AllowAll: %+v; want degraded by the node's open breaker", ob.events)
	}
}
