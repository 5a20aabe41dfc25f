package gin_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// TestRoutesIssue14: a strict POST /login limit (3 a minute) written with
// its method applies; a pattern that matches no route is logged at the
// first request served through an http.Server.
func TestRoutesIssue14(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, pattern string
		ok            int
		log           string
	}{
		{name: "a method in the pattern", pattern: "POST /login", ok: 3},
		{name: "no such route", pattern: "POST /api/login", ok: 5, log: `patterns="[POST /api/login]"`},
		{name: "a typo", pattern: "/logni", ok: 5,
			log: `level=ERROR msg="ratelimit: WithRoutes patterns match no route; their limits never apply" router=gin patterns=[/logni]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			r := gin.New()
			r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(100)),
				ratelimit.WithRoutes(map[string]*core.Limiter{c.pattern: limitertest.NewLimiter(t, core.PerMinute(3))}),
				ratelimit.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))))
			r.POST("/login", func(c *gin.Context) { c.Status(http.StatusOK) })
			srv := httptest.NewServer(r)
			defer srv.Close()
			got := 0
			for range 5 {
				resp, err := srv.Client().Post(srv.URL+"/login", "text/plain", nil)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					got++
				}
			}
			if got != c.ok {
				t.Errorf("%d of 5 POSTs answered 200, want %d", got, c.ok)
			}
			switch logged := log.String(); {
			case c.log == "" && logged != "":
				t.Errorf("logged %q, want nothing", logged)
			case c.log != "" && (!strings.Contains(logged, c.log) || strings.Count(logged, "\n") != 1):
				t.Errorf("logged %q, want one line with %q", logged, c.log)
			}
		})
	}
}

func TestRoutesSyntax(t *testing.T) {
	t.Parallel()
	l := limitertest.NewLimiter(t, core.PerMinute(1))
	defer func() {
		if got, _ := recover().(string); !strings.Contains(got, `pattern "/users/{id}": gin writes a path parameter ":id", not "{id}"`) {
			t.Errorf("panic %q", got)
		}
	}()
	ratelimit.Middleware(l, ratelimit.WithRoutes(map[string]*core.Limiter{"/users/{id}": l}))
}
