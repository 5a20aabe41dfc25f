package main

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/echo"
)

// newApp returns the app, its limits kept in store: one middleware on the
// whole app, with overrides by echo route path.
func newApp(store core.Store) (*echo.Echo, error) {
	def, err := core.New(core.Config{Store: store, Limit: core.PerMinute(60), FailMode: core.FailOpen})
	if err != nil {
		return nil, err
	}
	// Strict, and closed when Redis is down: guessing passwords must not
	// get faster during an outage.
	login, err := core.New(core.Config{Store: store, Limit: core.PerMinute(5), FailMode: core.FailClosed})
	if err != nil {
		return nil, err
	}
	api, err := core.New(core.Config{Store: store, Limit: core.PerMinute(1000), FailMode: core.FailOpen})
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	e.Use(ratelimit.Middleware(def, ratelimit.WithRoutes(map[string]*core.Limiter{
		"/login":         login,
		"/api/items":     api,
		"/api/items/:id": api, // /api/items/1 and /api/items/2 share one limit
	})))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "welcome\n") })
	g := e.Group("/api")
	g.GET("/items", func(c echo.Context) error { return c.String(http.StatusOK, "[]\n") })
	g.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, "item "+c.Param("id")+"\n") })
	return e, nil
}
