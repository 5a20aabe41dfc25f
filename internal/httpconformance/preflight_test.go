package httpconformance_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	"github.com/go-chi/cors"
	labecho "github.com/labstack/echo/v4"
	labechov5 "github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	echov5 "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/nethttp"
)

// pageOrigin is the origin the CORS middlewares of these tests allow.
const pageOrigin = "https://app.example"

// corsOptions is go-chi/cors's configuration for pageOrigin.
var corsOptions = cors.Options{AllowedOrigins: []string{pageOrigin}, AllowedMethods: []string{"GET", "POST"}}

// anyMethodApps serve /login for every method (net/http's
// mux.Handle("/login"), chi's Handle, echo's and gin's Any) with h,
// limited by l around the whole router; with corsFirst, a CORS middleware
// runs before the limiter, as the guide says.
var anyMethodApps = map[string]func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler{
	"nethttp": func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/login", h)
		app := nethttp.Middleware(l)(mux)
		if corsFirst {
			return cors.Handler(corsOptions)(app)
		}
		return app
	},
	"chi": func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler {
		r := gochi.NewRouter()
		if corsFirst {
			r.Use(cors.Handler(corsOptions))
		}
		r.Use(chi.Middleware(l))
		r.Handle("/login", h)
		return r
	},
	"echo": func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler {
		e := labecho.New()
		e.Use(echo.Middleware(l))
		e.Any("/login", func(c labecho.Context) error { h(c.Response(), c.Request()); return nil })
		if corsFirst { // echo's own CORS middlewares would add golang.org/x/time to go.mod
			return cors.Handler(corsOptions)(e)
		}
		return e
	},
	"echo/v5": func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler {
		e := labechov5.New()
		e.Use(echov5.Middleware(l))
		e.Any("/login", func(c *labechov5.Context) error { h(c.Response(), c.Request()); return nil })
		if corsFirst {
			return cors.Handler(corsOptions)(e)
		}
		return e
	},
	"gin": func(l *core.Limiter, h http.HandlerFunc, corsFirst bool) http.Handler {
		r := gingonic.New()
		r.Use(gin.Middleware(l))
		r.Any("/login", func(c *gingonic.Context) { h(c.Writer, c.Request) })
		if corsFirst {
			return cors.Handler(corsOptions)(r)
		}
		return r
	},
}

// preflight returns an OPTIONS request for target shaped as a CORS
// preflight: Access-Control-Request-Method, and Origin unless origin is "".
func preflight(target, origin string) *http.Request {
	r := httptest.NewRequest(http.MethodOptions, target, nil)
	r.RemoteAddr = "203.0.113.7:4000"
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	r.Header.Set("Access-Control-Request-Method", "POST")
	return r
}

// TestPreflightClaimed: a client that sends a preflight's header fields
// to a route serving every method (OPTIONS too) reaches its handler no
// more often than the limit allows, in every adapter, with or without
// Origin, and with a CORS middleware first as documented (go-chi/cors and
// echo's pass an OPTIONS without Origin on; issue 36 item 4). Before the
// fix, 12 of 12 reached the handler.
func TestPreflightClaimed(t *testing.T) {
	t.Parallel()
	for name, build := range anyMethodApps {
		for _, corsFirst := range []bool{false, true} {
			for _, origin := range []string{pageOrigin, ""} {
				where := name
				if corsFirst {
					where += " cors first"
				}
				if origin == "" {
					where += " no origin"
				}
				t.Run(where, func(t *testing.T) {
					t.Parallel()
					var reached atomic.Int64
					h := build(mustLimiter(t, core.NewMemoryStore(), "claim"), func(w http.ResponseWriter, _ *http.Request) {
						reached.Add(1)
					}, corsFirst)
					for range 12 {
						h.ServeHTTP(httptest.NewRecorder(), preflight("/login", origin))
					}
					got := reached.Load()
					t.Logf("12 preflight-shaped requests reached the handler %d times", got)
					if got > 3 {
						t.Errorf("12 preflight-shaped requests reached the handler %d times; the limit is 3", got)
					}
				})
			}
		}
	}
}

// TestPreflightClaimedServeKey: a handler limiting with Gate.ServeKey
// decides a preflight-shaped request like any other: it is in a handler.
func TestPreflightClaimedServeKey(t *testing.T) {
	t.Parallel()
	g := nethttp.NewGate(mustLimiter(t, core.NewMemoryStore(), "claimkey"))
	var reached atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		g.ServeKey(w, r, "user:alice", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	})
	for range 12 {
		mux.ServeHTTP(httptest.NewRecorder(), preflight("/login", pageOrigin))
	}
	got := reached.Load()
	t.Logf("12 preflight-shaped requests reached the handler %d times through ServeKey", got)
	if got > 3 {
		t.Errorf("12 preflight-shaped requests reached the handler %d times through ServeKey; the limit is 3", got)
	}
}

// TestPreflightClaimedSocket: the login case over a real connection: 12
// passwords tried as preflights against a login limit of 3.
func TestPreflightClaimedSocket(t *testing.T) {
	t.Parallel()
	var tried atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		tried.Add(1) // checks r's password
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv := httptest.NewServer(nethttp.Middleware(mustLimiter(t, core.NewMemoryStore(), "claimsocket"))(mux))
	defer srv.Close()
	for range 12 {
		req, err := http.NewRequest(http.MethodOptions, srv.URL+"/login", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", pageOrigin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.SetBasicAuth("alice", "guess")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := tried.Load()
	t.Logf("%d of 12 passwords tried over a socket as preflights", got)
	if got > 3 {
		t.Errorf("%d passwords tried over a socket as preflights; the login limit is 3", got)
	}
}

// anyMethodConcurrencyApps serve /work for every method through each
// adapter's Concurrency middleware.
var anyMethodConcurrencyApps = map[string]func(c *core.Concurrency, h http.HandlerFunc) http.Handler{
	"nethttp": func(c *core.Concurrency, h http.HandlerFunc) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/work", h)
		return nethttp.Concurrency(c)(mux)
	},
	"chi": func(c *core.Concurrency, h http.HandlerFunc) http.Handler {
		r := gochi.NewRouter()
		r.Use(chi.Concurrency(c))
		r.Handle("/work", h)
		return r
	},
	"echo": func(c *core.Concurrency, h http.HandlerFunc) http.Handler {
		e := labecho.New()
		e.Use(echo.Concurrency(c))
		e.Any("/work", func(ec labecho.Context) error { h(ec.Response(), ec.Request()); return nil })
		return e
	},
	"echo/v5": func(c *core.Concurrency, h http.HandlerFunc) http.Handler {
		e := labechov5.New()
		e.Use(echov5.Concurrency(c))
		e.Any("/work", func(ec *labechov5.Context) error { h(ec.Response(), ec.Request()); return nil })
		return e
	},
	"gin": func(c *core.Concurrency, h http.HandlerFunc) http.Handler {
		e := gingonic.New()
		e.Use(gin.Concurrency(c))
		e.Any("/work", func(gc *gingonic.Context) { h(gc.Writer, gc.Request) })
		return e
	},
}

// TestPreflightClaimedInFlight: 8 preflight-shaped requests at once to a
// route serving every method run one at a time against Max 1, in every
// adapter (before the fix, 8 ran at once).
func TestPreflightClaimedInFlight(t *testing.T) {
	t.Parallel()
	for name, build := range anyMethodConcurrencyApps {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := core.NewConcurrency(core.ConcurrencyConfig{
				Store: core.NewMemoryStore(), Name: "claim", Max: 1, Lease: time.Minute, FailMode: core.FailClosed, Timeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			var inside, most atomic.Int64
			events := make(chan struct{}, 8) // a request entered the handler or was answered without it
			release := make(chan struct{})
			h := build(c, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Entered", "1")
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				events <- struct{}{}
				<-release
				inside.Add(-1)
			})
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, preflight("/work", pageOrigin))
					if w.Header().Get("X-Entered") == "" {
						events <- struct{}{}
					}
				})
			}
			for range 8 {
				<-events
			}
			close(release)
			wg.Wait()
			got := most.Load()
			t.Logf("%d of 8 preflight-shaped requests ran at once", got)
			if got > 1 {
				t.Errorf("%d preflight-shaped requests ran at once; Max is 1", got)
			}
		})
	}
}
