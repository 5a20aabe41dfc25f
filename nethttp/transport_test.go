package nethttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// instances returns n limiters sharing one Redis (miniredis, or the real
// one), each with its own client and store: n instances of an app.
func instances(t *testing.T, redisName string, n int, lim core.Limit, maxWait time.Duration) []*core.Limiter {
	t.Helper()
	var addr, prefix string
	if redisName == "miniredis" {
		addr, prefix = miniredis.RunT(t).Addr(), "t:"
	} else {
		addr, prefix = redistest.Addr(t), redistest.Prefix(t)
	}
	ls := make([]*core.Limiter, n)
	for i := range ls {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		l, err := core.New(core.Config{
			Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: lim, Name: "upstream",
			FailMode: core.FailClosed, MaxWait: maxWait, Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}

// Two instances send 100 requests to one upstream allowed 50 a second
// with a burst of 50: every request goes (none refused, none retried),
// and the last cannot go before the refill allows it, (100-50)/50 s after
// the first.
func TestTransportSharesOneLimit(t *testing.T) {
	for _, redisName := range []string{"miniredis", "redis"} {
		t.Run(redisName, func(t *testing.T) {
			var hits atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
			defer up.Close()
			ls := instances(t, redisName, 2, core.PerSecond(50), 10*time.Second)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range 100 {
				client := &http.Client{Transport: nethttp.Transport(ls[i%2], nil)}
				wg.Go(func() {
					resp, err := client.Get(up.URL)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
			wg.Wait()
			if got := hits.Load(); got != 100 {
				t.Fatalf("the upstream saw %d requests, want 100", got)
			}
			// The refill's own pace (a property: waits are booked sleeps).
			if took := time.Since(start); took < 980*time.Millisecond {
				t.Fatalf("100 requests took %v, want at least 1s at 50 a second after a burst of 50", took)
			}
		})
	}
}

// An upstream's 429 with Retry-After pauses every instance: the response
// is passed on as it is (no retry), and the other instance's next request
// is not sent: it would wait longer than MaxWait.
func TestTransportRetryAfterPausesEveryInstance(t *testing.T) {
	for _, tc := range []struct{ name, retryAfter string }{
		{"seconds", "30"},
		{"HTTP date", time.Now().Add(31 * time.Second).UTC().Format(http.TimeFormat)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hits.Add(1)
				w.Header().Set("Retry-After", tc.retryAfter)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			defer up.Close()
			ls := instances(t, "miniredis", 2, core.PerSecond(10), time.Second)
			a := &http.Client{Transport: nethttp.Transport(ls[0], nil)}
			b := &http.Client{Transport: nethttp.Transport(ls[1], nil)}
			resp, err := a.Get(up.URL)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("got %v %v, want the upstream's 429", resp, err)
			}
			resp.Body.Close()
			_, err = b.Get(up.URL)
			var we *core.WaitError
			if !errors.Is(err, core.ErrWaitTooLong) || !errors.As(err, &we) || we.Wait < 29*time.Second {
				t.Fatalf("the other instance: got %v, want a wait of about 30s, not sent", err)
			}
			if got := hits.Load(); got != 1 {
				t.Fatalf("the upstream saw %d requests, want 1 (no retry, the other paused)", got)
			}
			host := strings.TrimPrefix(up.URL, "http://")
			if res, _ := ls[1].Peek(context.Background(), host, 1); res.RetryAfter < 29*time.Second || res.RetryAfter > 32*time.Second {
				t.Fatalf("the bucket: RetryAfter %v, want about 30s", res.RetryAfter)
			}
		})
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int64
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// A request Transport does not send has its body closed, as RoundTrip
// must; a cancelled context is returned as it is.
func TestTransportNotSent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("sent") }))
	defer up.Close()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(1), FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	rt := nethttp.Transport(l, nil, nethttp.WithKey(func(*http.Request) (string, error) { return "api", nil }))
	if _, err := l.Allow(context.Background(), "api"); err != nil {
		t.Fatal(err)
	}
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, up.URL, body)
	if _, err := rt.RoundTrip(req); !errors.Is(err, core.ErrWaitTooLong) || body.closed.Load() != 1 {
		t.Fatalf("got %v, %d closes; want ErrWaitTooLong and the body closed", err, body.closed.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// Connections are base's: sequential requests reuse one.
func TestTransportReusesConnections(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1000), FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: nethttp.Transport(l, &http.Transport{})}
	for range 20 {
		resp, err := client.Get(up.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if got := conns.Load(); got != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", got)
	}
}

func TestTransportRefusesServingOptions(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Transport took WithHeaders without a word")
		}
	}()
	nethttp.Transport(l, nil, nethttp.WithHeaders(nethttp.HeadersLegacy))
}
