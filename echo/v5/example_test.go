package echo_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo/v5"
)

// fixed is a clock that stands still, so the example's output is exact.
func fixed() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func Example() {
	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(core.WithClock(fixed)),
		Limit:    core.PerMinute(2),
		FailMode: core.FailOpen, // store down: allow (see core.FailMode)
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(ratelimit.Middleware(lim))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	for range 3 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d Remaining=%s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Remaining=1 Retry-After=""
	// 200 Remaining=0 Retry-After=""
	// 429 Remaining=0 Retry-After="30"
}

// Per-route limits by echo route path: /users/1 and /users/2 share the
// limit of "/users/:id"; other routes use the default limiter.
func ExampleWithRoutes() {
	newLimiter := func(l core.Limit) *core.Limiter {
		lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: l, FailMode: core.FailOpen})
		if err != nil {
			panic(err)
		}
		return lim
	}
	e := echo.New()
	e.Use(ratelimit.Middleware(newLimiter(core.PerMinute(100)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"/users/:id": newLimiter(core.PerMinute(2))})))
	ok := func(*echo.Context) error { return nil }
	e.GET("/users/:id", ok)
	e.GET("/about", ok)

	for _, path := range []string{"/users/1", "/users/2", "/users/3", "/about"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code, w.Header().Get("RateLimit-Limit"))
	}
	// Output:
	// /users/1 200 2
	// /users/2 200 2
	// /users/3 429 2
	// /about 200 100
}

// A stricter limit on one route: the middleware on that route alone.
func ExampleMiddleware_perRoute() {
	login, err := core.New(core.Config{
		Store:    core.NewMemoryStore(core.WithClock(fixed)),
		Limit:    core.PerMinute(1),
		FailMode: core.FailClosed, // store down: refuse logins (503)
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.POST("/login", func(c *echo.Context) error { return c.String(http.StatusOK, "welcome\n") }, ratelimit.Middleware(login))
	for range 2 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("POST", "/login", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Limit"))
	}
	// Output:
	// 200 1
	// 429 1
}

// A key from echo's context: the user an authentication middleware stored.
func ExampleMiddlewareWithKey() {
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: core.PerMinute(1), FailMode: core.FailOpen})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			c.Set("user", c.Request().Header.Get("X-User")) // stands for real authentication
			return next(c)
		}
	})
	e.Use(ratelimit.MiddlewareWithKey(lim, ratelimit.ContextKey("user")))
	e.GET("/", func(*echo.Context) error { return nil })

	for _, user := range []string{"alice", "alice", "bob", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%q %d\n", user, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}
