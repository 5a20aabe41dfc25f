package httpconformance_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	labecho "github.com/labstack/echo/v4"
	labechov5 "github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	echov5 "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// failedOnly counts only the responses of failed attempts.
func failedOnly(_ *http.Request, status int) bool { return status >= 400 }

// loginApps builds POST /login on every router, limited by l counting
// failures only: ?ok=1 logs in (200), anything else is refused (401; echo
// also through a returned error, as echo apps do).
func loginApps(l *core.Limiter) map[string]http.Handler {
	succeed := func(r *http.Request) bool { return r.URL.Query().Get("ok") == "1" }
	std := func(w http.ResponseWriter, r *http.Request) {
		if !succeed(r) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", std)
	cr := gochi.NewRouter()
	cr.With(chi.Middleware(l, chi.WithCountIf(failedOnly))).Post("/login", std)
	e := labecho.New()
	e.POST("/login", func(c labecho.Context) error {
		if !succeed(c.Request()) {
			return labecho.NewHTTPError(http.StatusUnauthorized)
		}
		return c.NoContent(http.StatusOK)
	}, echo.Middleware(l, echo.WithCountIf(failedOnly)))
	e5 := labechov5.New()
	e5.POST("/login", func(c *labechov5.Context) error {
		if !succeed(c.Request()) {
			return labechov5.ErrUnauthorized
		}
		return c.NoContent(http.StatusOK)
	}, echov5.Middleware(l, echov5.WithCountIf(failedOnly)))
	gingonic.SetMode(gingonic.ReleaseMode)
	g := gingonic.New()
	g.POST("/login", gin.Middleware(l, gin.WithCountIf(failedOnly)), func(c *gingonic.Context) { std(c.Writer, c.Request) })
	return map[string]http.Handler{
		"nethttp": nethttp.Middleware(l, nethttp.WithCountIf(failedOnly))(mux),
		"chi":     cr, "echo": e, "echov5": e5, "gin": g,
	}
}

// TestCountIfFailedLoginsOnly: with WithCountIf, successful logins cost
// nothing and never lock their client out; failures count, and the fourth
// against a limit of 3 is refused — in every router.
func TestCountIfFailedLoginsOnly(t *testing.T) {
	t.Parallel()
	for name := range loginApps(mustLimiter(t, core.NewMemoryStore(), "probe")) {
		t.Run(name, func(t *testing.T) {
			h := loginApps(mustLimiter(t, core.NewMemoryStore(), "login"))[name]
			post := func(ok bool) int {
				target := "/login"
				if ok {
					target += "?ok=1"
				}
				r := httptest.NewRequest(http.MethodPost, target, nil)
				r.RemoteAddr = "203.0.113.7:4000"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			steps := []struct {
				ok   bool
				want int
			}{
				{false, 401}, {false, 401},
				{true, 200}, {true, 200}, {true, 200}, {true, 200}, {true, 200}, // successes cost nothing
				{false, 401},              // the third failure
				{false, 429}, {true, 429}, // locked out: the limit holds
			}
			for i, s := range steps {
				if got := post(s.ok); got != s.want {
					t.Fatalf("request %d (success %v): %d, want %d", i+1, s.ok, got, s.want)
				}
			}
		})
	}
}

// TestCountIfConcurrentFailures: the cost is taken before the handler, so
// a flood of concurrent failing logins on real Redis admits at most the
// limit, whatever the timing (unlike "check, then count afterwards").
func TestCountIfConcurrentFailures(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { c.Close() })
	for name := range loginApps(mustLimiter(t, core.NewMemoryStore(), "probe")) {
		t.Run(name, func(t *testing.T) {
			store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
			h := loginApps(mustLimiter(t, store, "login"))[name]
			var reached atomic.Int64
			var wg sync.WaitGroup
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := httptest.NewRequest(http.MethodPost, "/login", nil)
					r.RemoteAddr = "203.0.113.7:4000"
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code == http.StatusUnauthorized {
						reached.Add(1)
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: 50 concurrent failing logins, %d reached the handler (limit 3)", name, reached.Load())
			if reached.Load() != 3 {
				t.Fatalf("%d failing logins reached the handler; want exactly the limit, 3", reached.Load())
			}
		})
	}
}

func mustLimiter(t *testing.T, s core.Store, name string) *core.Limiter {
	t.Helper()
	l, err := core.New(core.Config{Store: s, Name: name, Limit: core.PerMinute(3), FailMode: core.FailClosed, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// failureApps serves POST /login with h on every router, limited by l
// counting failures only.
func failureApps(l *core.Limiter, h http.HandlerFunc) map[string]http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", h)
	cr := gochi.NewRouter()
	cr.With(chi.Middleware(l, chi.WithCountIf(failedOnly))).Post("/login", h)
	e := labecho.New()
	e.POST("/login", func(c labecho.Context) error { h(c.Response(), c.Request()); return nil },
		echo.Middleware(l, echo.WithCountIf(failedOnly)))
	e5 := labechov5.New()
	e5.POST("/login", func(c *labechov5.Context) error { h(c.Response(), c.Request()); return nil },
		echov5.Middleware(l, echov5.WithCountIf(failedOnly)))
	gingonic.SetMode(gingonic.ReleaseMode)
	g := gingonic.New()
	g.POST("/login", gin.Middleware(l, gin.WithCountIf(failedOnly)), func(c *gingonic.Context) { h(c.Writer, c.Request) })
	return map[string]http.Handler{
		"nethttp": nethttp.Middleware(l, nethttp.WithCountIf(failedOnly))(mux),
		"chi":     cr, "echo": e, "echov5": e5, "gin": g,
	}
}

// wantFailuresCounted sends 5 failing attempts through h (limit 3) and
// wants the last two refused: every failure counted.
func wantFailuresCounted(t *testing.T, send func() int, failure int) {
	t.Helper()
	want := []int{failure, failure, failure, http.StatusTooManyRequests, http.StatusTooManyRequests}
	for i, w := range want {
		if got := send(); got != w {
			t.Fatalf("attempt %d: %d, want %d (a failure must count)", i+1, got, w)
		}
	}
}

// TestCountIfFailureAfterEarlyHints: a 103 Early Hints before the 401 is
// not the response's status (issue 23.2: 9 of 9 failures reached the
// handler). Only net/http and chi send 1xx responses; echo and gin record
// the first status as final.
func TestCountIfFailureAfterEarlyHints(t *testing.T) {
	t.Parallel()
	hinted := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusUnauthorized)
	}
	for _, name := range []string{"nethttp", "chi"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(failureApps(mustLimiter(t, core.NewMemoryStore(), "hints"), hinted)[name])
			defer srv.Close()
			wantFailuresCounted(t, func() int { return postServer(t, srv) }, http.StatusUnauthorized)
		})
	}
}

// TestCountIfFailureAfterHijack: a failure written on a hijacked
// connection counts in every adapter: its response is not seen, so it is
// never given back (issue 23.2).
func TestCountIfFailureAfterHijack(t *testing.T) {
	t.Parallel()
	hijacked := func(w http.ResponseWriter, _ *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = rw.Flush()
	}
	for name := range failureApps(mustLimiter(t, core.NewMemoryStore(), "probe"), hijacked) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(failureApps(mustLimiter(t, core.NewMemoryStore(), "hijack"), hijacked)[name])
			defer srv.Close()
			wantFailuresCounted(t, func() int { return postServer(t, srv) }, http.StatusUnauthorized)
		})
	}
}

// TestCountIfGinErrorAnsweredOutside: the common gin pattern, a handler
// calling c.Error and an outer middleware writing the 401 after the
// chain returns: the failure counts (issue 23.2: 9 of 9 reached the
// handler); a success answered the same way costs nothing.
func TestCountIfGinErrorAnsweredOutside(t *testing.T) {
	t.Parallel()
	gingonic.SetMode(gingonic.ReleaseMode)
	r := gingonic.New()
	r.Use(func(c *gingonic.Context) { // the app's error middleware
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(http.StatusUnauthorized, gingonic.H{"error": c.Errors.Last().Error()})
		}
	})
	r.POST("/login", gin.Middleware(mustLimiter(t, core.NewMemoryStore(), "gin-errors"), gin.WithCountIf(failedOnly)),
		func(c *gingonic.Context) {
			if c.Query("ok") != "1" {
				_ = c.Error(errors.New("wrong password"))
				return
			}
			c.Status(http.StatusOK)
		})
	for range 5 {
		if got := postTo(r, "/login?ok=1"); got != http.StatusOK {
			t.Fatalf("success: %d, want 200", got)
		}
	}
	wantFailuresCounted(t, func() int { return post(r) }, http.StatusUnauthorized)
}

// postServer posts to srv's /login over a real connection.
func postServer(t *testing.T, srv *httptest.Server) int {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/login", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func post(h http.Handler) int { return postTo(h, "/login") }

func postTo(h http.Handler, target string) int {
	r := httptest.NewRequest(http.MethodPost, target, nil)
	r.RemoteAddr = "203.0.113.7:4000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}
