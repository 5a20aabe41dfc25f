package echo_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// A refusal is written by the middleware and returns nil: the handler does
// not run, and echo's HTTPErrorHandler does not replace the problem body.
func TestDeniedStopsTheChain(t *testing.T) {
	t.Parallel()
	e := echo.New()
	var handled, errorHandled int
	e.HTTPErrorHandler = func(*echo.Context, error) { errorHandled++ }
	var status int
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			err := next(c)
			if res, uerr := echo.UnwrapResponse(c.Response()); uerr == nil {
				status = res.Status // what a logging middleware sees
			}
			return err
		}
	})
	e.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(1))))
	e.GET("/", func(c *echo.Context) error { handled++; return c.NoContent(http.StatusNoContent) })

	if w := limitertest.Get(e, "/"); w.Code != http.StatusNoContent {
		t.Fatalf("first request: %d", w.Code)
	}
	w := limitertest.Get(e, "/")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("second request: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if handled != 1 || errorHandled != 0 || status != http.StatusTooManyRequests {
		t.Errorf("handler ran %d times, error handler %d times, logged status %d; want 1, 0, 429", handled, errorHandled, status)
	}
}

// Group and route middlewares see the route path, as e.Use does.
func TestRoutesInGroupsAndRoutes(t *testing.T) {
	t.Parallel()
	strict := limitertest.NewLimiter(t, core.PerMinute(1))
	e := echo.New()
	ok := func(c *echo.Context) error { return c.NoContent(http.StatusOK) }
	api := e.Group("/api", ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"/api/users/:id": strict})))
	api.GET("/users/:id", ok)
	api.GET("/items", ok)
	e.GET("/login", ok, ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(2))))

	for _, c := range []struct {
		path  string
		code  int
		limit string
	}{
		{"/api/users/1", 200, "1"},
		{"/api/users/2", 429, "1"},
		{"/api/items", 200, "50"},
		{"/login", 200, "2"},
	} {
		w := limitertest.Get(e, c.path)
		if w.Code != c.code || w.Header().Get("RateLimit-Limit") != c.limit {
			t.Errorf("%s: %d limit %q, want %d limit %q", c.path, w.Code, w.Header().Get("RateLimit-Limit"), c.code, c.limit)
		}
	}
}

func TestMiddlewareWithKey(t *testing.T) {
	t.Parallel()
	var seen []string
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("user", u) // what an authentication middleware does
			}
			return next(c)
		}
	})
	e.Use(ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.ContextKey("user"),
		ratelimit.WithObserver(func(_ *http.Request, _ core.Result, err error, _ bool) {
			if err != nil {
				seen = append(seen, "error")
				if !errors.Is(err, ratelimit.ErrKey) || !errors.Is(err, keyfuncs.ErrNoUser) {
					t.Errorf("error %v, want ErrKey and keyfuncs.ErrNoUser", err)
				}
				return
			}
			seen = append(seen, "decided")
		})))
	e.GET("/", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })

	serve := func(user string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	for i, c := range []struct {
		user string
		want int
	}{{"alice", 200}, {"alice", 429}, {"bob", 200}, {"", 400}} {
		if got := serve(c.user); got != c.want {
			t.Errorf("request %d (%q): %d, want %d", i+1, c.user, got, c.want)
		}
	}
	if len(seen) != 4 || seen[3] != "error" {
		t.Errorf("observer saw %v", seen)
	}
}

func TestContextKey(t *testing.T) {
	t.Parallel()
	e := echo.New()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	k := ratelimit.ContextKey("user")
	if _, err := k(c); !errors.Is(err, keyfuncs.ErrNoUser) {
		t.Errorf("no user: %v, want keyfuncs.ErrNoUser", err)
	}
	c.Set("user", 42)
	if _, err := k(c); !errors.Is(err, keyfuncs.ErrNoUser) {
		t.Errorf("not a string: %v, want keyfuncs.ErrNoUser", err)
	}
	c.Set("user", "")
	if _, err := k(c); !errors.Is(err, keyfuncs.ErrEmptyKey) {
		t.Errorf("empty: %v, want keyfuncs.ErrEmptyKey", err)
	}
	c.Set("user", "alice@example.com")
	if got, err := k(c); got != "user:alice@example.com" || err != nil {
		t.Errorf("got %q, %v", got, err)
	}
	c.Set("user", "ali{ce}")
	if got, err := k(c); err != nil || got[:5] != "user#" {
		t.Errorf("unusual id: got %q, %v; want it hashed", got, err)
	}
}

func TestMiddlewareWithKeyPanicsOnNil(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), nil)
}

// TestMiddlewareWithKeySkip: WithSkip runs before the KeyFunc, which a
// skipped request never reaches.
func TestMiddlewareWithKeySkip(t *testing.T) {
	t.Parallel()
	calls := 0
	key := func(*echo.Context) (string, error) { calls++; return "user:alice", nil }
	e := echo.New()
	e.Use(ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), key,
		ratelimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" })))
	e.GET("/health", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	if w := limitertest.Get(e, "/health"); w.Code != http.StatusOK || calls != 0 {
		t.Errorf("skipped request: %d, key computed %d times, want 200 and 0", w.Code, calls)
	}
	if w := limitertest.Get(e, "/"); w.Code != http.StatusOK || calls != 1 {
		t.Errorf("request: %d, key computed %d times, want 200 and 1", w.Code, calls)
	}
}

// TestCountIfStatus: WithCountIf sees the status the handler wrote, or the
// one echo will write for a returned error.
func TestCountIfStatus(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(2)),
		ratelimit.WithCountIf(func(_ *http.Request, status int) bool { return status >= 400 })))
	e.GET("/ok", func(c *echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/written", func(c *echo.Context) error { return c.NoContent(http.StatusForbidden) })
	e.GET("/returned", func(*echo.Context) error { return echo.ErrUnauthorized })
	e.GET("/failed", func(*echo.Context) error { return errors.New("boom") })
	for i, c := range []struct {
		path string
		want int
	}{
		{"/ok", 200}, {"/ok", 200}, {"/ok", 200}, // refunded: they never count
		{"/written", 403}, {"/returned", 401}, // two failures: the limit
		{"/ok", 429}, {"/failed", 429},
	} {
		if w := limitertest.Get(e, c.path); w.Code != c.want {
			t.Errorf("request %d %s: %d, want %d", i+1, c.path, w.Code, c.want)
		}
	}
}
