package gin_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode) // no debug route listing on stdout
	os.Exit(m.Run())
}

// A refusal is written by the middleware, then c.Abort(): later handlers
// do not run, earlier ones see the status after c.Next().
func TestDeniedAborts(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var handled, after int
	var status int
	var aborted bool
	r.Use(func(c *gin.Context) {
		c.Next()
		status, aborted = c.Writer.Status(), c.IsAborted()
	})
	r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(1))))
	r.Use(func(*gin.Context) { after++ })
	r.GET("/", func(c *gin.Context) { handled++; c.Status(http.StatusNoContent) })

	if w := limitertest.Get(r, "/"); w.Code != http.StatusNoContent {
		t.Fatalf("first request: %d", w.Code)
	}
	w := limitertest.Get(r, "/")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("second request: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if handled != 1 || after != 1 || status != http.StatusTooManyRequests || !aborted {
		t.Errorf("handler ran %d times, next middleware %d times, status %d, aborted %v; want 1, 1, 429, true", handled, after, status, aborted)
	}
}

// Group and route middlewares see the route path, as r.Use does.
func TestRoutesInGroupsAndRoutes(t *testing.T) {
	t.Parallel()
	strict := limitertest.NewLimiter(t, core.PerMinute(1))
	r := gin.New()
	ok := func(c *gin.Context) { c.Status(http.StatusOK) }
	api := r.Group("/api", ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(50)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"/api/users/:id": strict})))
	api.GET("/users/:id", ok)
	api.GET("/items", ok)
	r.GET("/login", ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(2))), ok)

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
		w := limitertest.Get(r, c.path)
		if w.Code != c.code || w.Header().Get("RateLimit-Limit") != c.limit {
			t.Errorf("%s: %d limit %q, want %d limit %q", c.path, w.Code, w.Header().Get("RateLimit-Limit"), c.code, c.limit)
		}
	}
}

func TestMiddlewareWithKey(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u) // what an authentication middleware does
		}
	})
	var errs []error
	r.Use(ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.ContextKey("user"),
		ratelimit.WithObserver(func(_ *http.Request, _ core.Result, err error, _ bool) {
			if err != nil {
				errs = append(errs, err)
			}
		})))
	r.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })

	serve := func(user string) int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
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
	if len(errs) != 1 || !errors.Is(errs[0], ratelimit.ErrKey) || !errors.Is(errs[0], keyfuncs.ErrNoUser) {
		t.Errorf("errors %v, want one matching ErrKey and keyfuncs.ErrNoUser", errs)
	}
}

func TestContextKey(t *testing.T) {
	t.Parallel()
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
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
}

func TestPanicsOnNil(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"MiddlewareWithKey": func() { ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestMiddlewareWithKeySkip: WithSkip runs before the KeyFunc, which a
// skipped request never reaches (issue 14).
func TestMiddlewareWithKeySkip(t *testing.T) {
	t.Parallel()
	calls := 0
	key := func(*gin.Context) (string, error) { calls++; return "user:alice", nil }
	r := gin.New()
	r.Use(ratelimit.MiddlewareWithKey(limitertest.NewLimiter(t, core.PerMinute(1)), key,
		ratelimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" })))
	r.GET("/health", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
	if w := limitertest.Get(r, "/health"); w.Code != http.StatusOK || calls != 0 {
		t.Errorf("skipped request: %d, key computed %d times, want 200 and 0", w.Code, calls)
	}
	if w := limitertest.Get(r, "/"); w.Code != http.StatusOK || calls != 1 {
		t.Errorf("request: %d, key computed %d times, want 200 and 1", w.Code, calls)
	}
}
