package soak_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	labecho "github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Attacks on the limit by a client that controls only its own connection
// and its request's deadline (issue 12). Each runs the README's setup, a
// PerMinute(3) limiter on real Redis, and asserts the limit holds and no
// decision was handed to FailMode (DESIGN §2a).

func init() { gingonic.SetMode(gingonic.ReleaseMode) } // no debug route listing on stdout

// attackLimit is the limit every attack tries to get past.
var attackLimit = core.PerMinute(3)

// attackClients are the Redis clients the attacks run against: go-redis's
// default (which ignores context deadlines) and the README's recommended
// one.
var attackClients = []struct {
	name string
	opts redis.Options
}{
	{"default client", redis.Options{}},
	{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}},
}

// attackLimiter returns a limiter of attackLimit on a RedisStore of its own
// (a fresh prefix) with the client options opts, and the count of its
// degraded decisions observed: one for every degraded decision.
func attackLimiter(t *testing.T, opts redis.Options, mode core.FailMode) (*core.Limiter, *atomic.Int64) {
	t.Helper()
	opts.Addr = redistest.Addr(t)
	c := redis.NewClient(&opts)
	t.Cleanup(func() { c.Close() })
	var errs atomic.Int64
	lim, err := core.New(core.Config{
		Store:    core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))),
		Limit:    attackLimit,
		FailMode: mode,
		Observer: onStoreError(func(error) { errs.Add(1) }),
		Logger:   discard,
		// The attacks are about cancellation: a loaded -race run must
		// not pass a slow decision off as one.
		Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return lim, &errs
}

// attackAdapters wrap a handler in each adapter's default middleware
// (keyed by keyfuncs.IP()), served at "/".
var attackAdapters = []struct {
	name string
	wrap func(l *core.Limiter, h http.HandlerFunc) http.Handler
}{
	{"nethttp", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		return nethttp.Middleware(l)(h)
	}},
	{"chi", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		r := gochi.NewRouter()
		r.Use(chi.Middleware(l))
		r.Get("/", h)
		return r
	}},
	{"echo", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		e := labecho.New()
		e.Use(echo.Middleware(l))
		e.GET("/", func(c labecho.Context) error { h(c.Response(), c.Request()); return nil })
		return e
	}},
	{"gin", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		r := gingonic.New()
		r.Use(gin.Middleware(l))
		r.GET("/", func(c *gingonic.Context) { h(c.Writer, c.Request) })
		return r
	}},
}

// attackSent is how many requests each connection attack sends, all from
// 127.0.0.1.
const attackSent = 30

// runConnectionAttack sends attackSent requests through every adapter and
// client, each on a connection of its own that send ends as the attack
// does, and checks that the handler ran at most the limit's burst and that
// no decision was degraded.
func runConnectionAttack(t *testing.T, send func(t *testing.T, addr string)) {
	t.Helper()
	for _, cl := range attackClients {
		for _, ad := range attackAdapters {
			t.Run(cl.name+"/"+ad.name, func(t *testing.T) {
				lim, errs := attackLimiter(t, cl.opts, core.FailOpen)
				var calls atomic.Int64
				srv := httptest.NewServer(ad.wrap(lim, func(w http.ResponseWriter, _ *http.Request) {
					calls.Add(1)
					io.WriteString(w, "sms sent\n")
				}))
				for range attackSent {
					send(t, srv.Listener.Addr().String())
				}
				srv.Close() // waits for every request still being served
				t.Logf("handler ran %d of %d, degraded %d", calls.Load(), attackSent, errs.Load())
				if got, want := calls.Load(), int64(attackLimit.Capacity()); got > want {
					t.Errorf("handler ran %d times of %d sent, want at most %d", got, attackSent, want)
				}
				if got := errs.Load(); got != 0 {
					t.Errorf("%d degraded decisions (observed), want 0: a client's cancellation is not a store failure", got)
				}
			})
		}
	}
}

// rawGet dials addr and writes one GET request on the connection.
func rawGet(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

// TestAttackHalfClosedConnection: the client sends its request, then shuts
// down its sending side (FIN), which net/http takes for a client gone and
// cancels the request's context; it still reads the response.
func TestAttackHalfClosedConnection(t *testing.T) {
	runConnectionAttack(t, func(t *testing.T, addr string) {
		c := rawGet(t, addr)
		defer c.Close()
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c) // until the server closes
	})
}

// TestAttackClosedConnection: the client sends its request and closes the
// connection at once, without waiting for an answer: a password guess or
// an SMS sent blind.
func TestAttackClosedConnection(t *testing.T) {
	runConnectionAttack(t, func(t *testing.T, addr string) {
		rawGet(t, addr).Close()
	})
}

// runDeadlineAttack makes 50 decisions on one key with the caller's
// context spoiled by spoil, then one normal decision for a victim on
// another key: the spoiled ones take no more than the limit and degrade
// nothing, and the victim is decided by Redis (allowed, not degraded) in
// every FailMode: nothing opened the circuit breaker.
func runDeadlineAttack(t *testing.T, spoil func() (context.Context, context.CancelFunc)) {
	t.Helper()
	const sent = 50
	for _, cl := range attackClients {
		for _, mode := range []core.FailMode{core.FailClosed, core.FailOpen} {
			t.Run(fmt.Sprintf("%s/fail %s", cl.name, mode), func(t *testing.T) {
				lim, errs := attackLimiter(t, cl.opts, mode)
				allowed, degraded := 0, 0
				for range sent {
					ctx, cancel := spoil()
					res, err := lim.Allow(ctx, "attacker")
					cancel()
					if err != nil {
						t.Fatalf("Allow: %v", err)
					}
					if res.Allowed {
						allowed++
					}
					if res.Degraded {
						degraded++
					}
				}
				victim, err := lim.Allow(context.Background(), "victim")
				if err != nil {
					t.Fatalf("victim's Allow: %v", err)
				}
				t.Logf("attacker: %d allowed, %d degraded of %d; victim: allowed %v, degraded %v; observed %d",
					allowed, degraded, sent, victim.Allowed, victim.Degraded, errs.Load())
				if want := attackLimit.Capacity(); allowed > want {
					t.Errorf("attacker: %d of %d allowed, want at most %d", allowed, sent, want)
				}
				if degraded != 0 {
					t.Errorf("attacker: %d of %d decisions degraded, want 0: the caller's deadline is not a store failure", degraded, sent)
				}
				if !victim.Allowed || victim.Degraded {
					t.Errorf("victim: allowed %v, degraded %v; want allowed by Redis, not degraded", victim.Allowed, victim.Degraded)
				}
				if got := errs.Load(); got != 0 {
					t.Errorf("%d degraded decisions observed, want 0", got)
				}
			})
		}
	}
}

// TestAttackShortDeadline: a caller whose context has 1µs left (a deadline
// a client chose, propagated by some middleware) must not count as a store
// failure: three in a row would open the breaker for every other client.
func TestAttackShortDeadline(t *testing.T) {
	runDeadlineAttack(t, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Microsecond)
	})
}

// TestAttackCancelledContext: a caller whose context is already cancelled
// is decided like any other, not by FailMode.
func TestAttackCancelledContext(t *testing.T) {
	runDeadlineAttack(t, func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	})
}

// onStoreError is an Observer passing each degraded decision's cause to
// the function.
type onStoreError func(error)

func (f onStoreError) Decision(e core.DecisionEvent) {
	if e.Err != nil {
		f(e.Err)
	}
}

func (onStoreError) BreakerChange(string, bool) {}
