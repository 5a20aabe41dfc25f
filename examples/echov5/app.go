package main

import (
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo/v5"
)

// newApp returns the app, its limiters made from base (the store and
// anything else they share): one middleware on the whole app,
// with overrides by echo route path.
func newApp(base core.Config) (*echo.Echo, error) {
	def, err := limiter(base, core.PerMinute(60), core.FailOpen)
	if err != nil {
		return nil, err
	}
	// Strict, and closed when Redis is down: guessing passwords must not
	// get faster during an outage.
	login, err := limiter(base, core.PerMinute(5), core.FailClosed)
	if err != nil {
		return nil, err
	}
	api, err := limiter(base, core.PerMinute(1000), core.FailOpen)
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.Use(ratelimit.Middleware(def, ratelimit.WithRoutes(map[string]*core.Limiter{
		"POST /login":        login,
		"GET /api/items":     api,
		"GET /api/items/:id": api, // /api/items/1 and /api/items/2 share one limit
	})))
	e.GET("/", func(c *echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	e.POST("/login", func(c *echo.Context) error { return c.String(http.StatusOK, "welcome\n") })
	g := e.Group("/api")
	g.GET("/items", func(c *echo.Context) error { return c.String(http.StatusOK, "[]\n") })
	g.GET("/items/:id", func(c *echo.Context) error { return c.String(http.StatusOK, "item "+c.Param("id")+"\n") })
	return e, nil
}

// limiter returns a limiter of base with its own limit and failure mode.
func limiter(base core.Config, l core.Limit, mode core.FailMode) (*core.Limiter, error) {
	base.Limit, base.FailMode = l, mode
	return core.New(base)
}
