package main

import (
	"net/http"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/exampletest"
)

// The app answers the router examples' shared table (logins limited,
// item pages sharing a limit, Redis down).
func TestApp(t *testing.T) {
	exampletest.Run(t, func(base core.Config) (http.Handler, error) { return newApp(base) })
}
