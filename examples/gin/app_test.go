package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/exampletest"
)

// The app answers the router examples' shared table (logins limited,
// item pages sharing a limit, Redis down).
func TestApp(t *testing.T) {
	exampletest.Run(t, func(base core.Config) (http.Handler, error) { return newApp(base) })
}

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}
