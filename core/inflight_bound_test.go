package core_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestMaxInFlightBoundsCallsPastDeadlines (issue 23, item 5): against a
// Redis that accepts and never answers, with go-redis defaults (calls run
// on past their callers' 20ms deadlines) and the breaker held closed, the
// store never holds more than MaxInFlight decisions, never opens more
// connections (calls) than that, and the rest are decided at once as
// ErrOverloaded; on a standalone client and on a one-shard Ring.
func TestMaxInFlightBoundsCallsPastDeadlines(t *testing.T) {
	t.Parallel()
	const bound = 4
	clients := map[string]func(addr string) redis.UniversalClient{
		"standalone": func(addr string) redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: addr}) },
		"ring": func(addr string) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var conns atomic.Int64
			addr := listen(t, func(c net.Conn) {
				conns.Add(1)
				buf := make([]byte, 1<<16)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
			c := mk(addr)
			t.Cleanup(func() { c.Close() })
			store := core.NewRedisStore(c)
			var overloaded atomic.Int64
			l := limitertest.New(t, core.Config{Store: store, Limit: core.PerSecond(10), FailMode: core.FailOpen, Timeout: 20 * time.Millisecond,
				MaxInFlight: bound, BreakerFailures: 1 << 30, DenyCacheSize: -1,
				Observer: onStoreError(func(err error) {
					if errors.Is(err, core.ErrOverloaded) {
						overloaded.Add(1)
					}
				})})
			var peak atomic.Int64
			stop := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					if n := core.StoreRunning(store); n > peak.Load() {
						peak.Store(n)
					}
					select {
					case <-stop:
						return
					default:
						time.Sleep(100 * time.Microsecond)
					}
				}
			}()
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						if r, _ := l.Allow(context.Background(), strconv.Itoa(g*10+i)); !r.Degraded {
							t.Errorf("decision on a stalled Redis: %+v; want degraded", r)
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			<-watched
			t.Logf("%s: peak %d decisions running in the store, %d connections, %d of 320 overloaded", name, peak.Load(), conns.Load(), overloaded.Load())
			if peak.Load() > bound {
				t.Errorf("peak %d decisions running in the store; want at most MaxInFlight %d", peak.Load(), bound)
			}
			if conns.Load() > bound {
				t.Errorf("%d connections opened (one per call still running); want at most MaxInFlight %d", conns.Load(), bound)
			}
			if overloaded.Load() == 0 {
				t.Errorf("no decision was refused as ErrOverloaded")
			}
		})
	}
}
