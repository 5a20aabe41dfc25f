package main

import (
	"testing"

	"github.com/sluicehq/ratelimit/internal/exampletest"
)

// The app answers the router examples' shared table (logins limited,
// item pages sharing a limit, Redis down).
func TestApp(t *testing.T) { exampletest.Run(t, newApp) }
