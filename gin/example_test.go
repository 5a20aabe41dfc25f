package gin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/gin"
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
	r := gin.New()
	r.Use(ratelimit.Middleware(lim))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d Remaining=%s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Remaining=1 Retry-After=""
	// 200 Remaining=0 Retry-After=""
	// 429 Remaining=0 Retry-After="30"
}

// Per-route limits by gin route path: /users/1 and /users/2 share the
// limit of "/users/:id"; other routes use the default limiter.
func ExampleWithRoutes() {
	newLimiter := func(l core.Limit) *core.Limiter {
		lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: l, FailMode: core.FailOpen})
		if err != nil {
			panic(err)
		}
		return lim
	}
	r := gin.New()
	r.Use(ratelimit.Middleware(newLimiter(core.PerMinute(100)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"/users/:id": newLimiter(core.PerMinute(2))})))
	ok := func(*gin.Context) {}
	r.GET("/users/:id", ok)
	r.GET("/about", ok)

	for _, path := range []string{"/users/1", "/users/2", "/users/3", "/about"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
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
	r := gin.New()
	r.POST("/login", ratelimit.Middleware(login), func(c *gin.Context) { c.String(http.StatusOK, "welcome\n") })
	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("POST", "/login", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Limit"))
	}
	// Output:
	// 200 1
	// 429 1
}

// A key from gin's context: the user an authentication middleware stored.
func ExampleMiddlewareWithKey() {
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: core.PerMinute(1), FailMode: core.FailOpen})
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Set("user", c.GetHeader("X-User")) // stands for real authentication
	})
	r.Use(ratelimit.MiddlewareWithKey(lim, ratelimit.ContextKey("user")))
	r.GET("/", func(*gin.Context) {})

	for _, user := range []string{"alice", "alice", "bob", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", user, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}
