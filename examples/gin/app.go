package main

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/gin"
)

// newApp returns the app, its limits kept in store: one middleware on the
// whole engine, with overrides by gin route path.
func newApp(store core.Store) (*gin.Engine, error) {
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

	r := gin.New()
	r.Use(gin.Recovery())
	r.Use(ratelimit.Middleware(def, ratelimit.WithRoutes(map[string]*core.Limiter{
		"/login":         login,
		"/api/items":     api,
		"/api/items/:id": api, // /api/items/1 and /api/items/2 share one limit
	})))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	r.POST("/login", func(c *gin.Context) { c.String(http.StatusOK, "welcome\n") })
	g := r.Group("/api")
	g.GET("/items", func(c *gin.Context) { c.String(http.StatusOK, "[]\n") })
	g.GET("/items/:id", func(c *gin.Context) { c.String(http.StatusOK, "item "+c.Param("id")+"\n") })
	return r, nil
}
