package httpconformance_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	gingonic "github.com/gin-gonic/gin"
	gochi "github.com/go-chi/chi/v5"
	labecho "github.com/labstack/echo/v4"
	labechov5 "github.com/labstack/echo/v5"

	"github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/echo"
	echov5 "github.com/sluicehq/ratelimit/echo/v5"
	"github.com/sluicehq/ratelimit/gin"
	"github.com/sluicehq/ratelimit/nethttp"
)

// concurrencyApps serve GET /work through each adapter's Concurrency
// middleware; the handler runs work(w, r), on the router's own writer.
var concurrencyApps = map[string]func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler{
	"nethttp": func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("GET /work", nethttp.Concurrency(c, opts...)(http.HandlerFunc(work)))
		return mux
	},
	"chi": func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler {
		r := gochi.NewRouter()
		r.Use(chi.Concurrency(c, opts...))
		r.Get("/work", work)
		return r
	},
	"echo": func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler {
		e := labecho.New()
		e.Use(echo.Concurrency(c, opts...))
		e.GET("/work", func(ec labecho.Context) error { work(ec.Response(), ec.Request()); return nil })
		return e
	},
	"echo/v5": func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler {
		e := labechov5.New()
		e.Use(echov5.Concurrency(c, opts...))
		e.GET("/work", func(ec *labechov5.Context) error { work(ec.Response(), ec.Request()); return nil })
		return e
	},
	"gin": func(c *core.Concurrency, work func(http.ResponseWriter, *http.Request), opts ...nethttp.Option) http.Handler {
		gingonic.SetMode(gingonic.ReleaseMode)
		e := gingonic.New()
		e.Use(gin.Concurrency(c, opts...))
		e.GET("/work", func(gc *gingonic.Context) { work(gc.Writer, gc.Request) })
		return e
	},
}

// response is what a client sees, for comparing routers.
type response struct {
	status int
	header string // the rate-limit fields, Retry-After and Content-Type
	body   string
}

func see(w *httptest.ResponseRecorder) response {
	var lines []string
	for k, v := range w.Header() {
		if strings.HasPrefix(k, "Ratelimit") || k == "Retry-After" || k == "Content-Type" {
			lines = append(lines, k+": "+strings.Join(v, ","))
		}
	}
	slices.Sort(lines)
	return response{w.Code, strings.Join(lines, "\n"), w.Body.String()}
}

func serveWork(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/work", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestConcurrencyConformance runs one story through every adapter's
// Concurrency middleware and checks that each answers byte for byte as
// the others: a request holds the one slot; another is refused with 429;
// the holder's response; a panicking handler gives its slot back; a
// request after it is served.
func TestConcurrencyConformance(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	story := func(t *testing.T, build func(*core.Concurrency, func(http.ResponseWriter, *http.Request), ...nethttp.Option) http.Handler) []response {
		c, err := core.NewConcurrency(core.ConcurrencyConfig{
			Store: core.NewMemoryStore(core.WithClock(func() time.Time { return epoch })), Name: "work", Max: 1,
			Lease: 20 * time.Second, FailMode: core.FailClosed,
		})
		if err != nil {
			t.Fatal(err)
		}
		in, out := make(chan struct{}), make(chan struct{})
		mode := "hold"
		h := build(c, func(w http.ResponseWriter, r *http.Request) {
			switch mode {
			case "hold":
				close(in)
				<-out
			case "panic":
				panic(http.ErrAbortHandler)
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		})
		var got []response
		held := make(chan *httptest.ResponseRecorder)
		go func() { held <- serveWork(h) }()
		<-in
		mode = "plain"
		got = append(got, see(serveWork(h)))
		close(out)
		got = append(got, see(<-held))
		mode = "panic"
		func() {
			defer func() { _ = recover() }() // echo and gin let it through too
			serveWork(h)
		}()
		mode = "plain"
		got = append(got, see(serveWork(h)))
		return got
	}
	want := []response{
		{429, "Content-Type: application/problem+json\nRatelimit-Limit: 1\nRatelimit-Remaining: 0\nRatelimit-Reset: 1\nRetry-After: 1",
			`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests in flight; retry in 1 second"}`},
		{200, "Content-Type: text/plain; charset=utf-8\nRatelimit-Limit: 1\nRatelimit-Remaining: 0\nRatelimit-Reset: 20", "ok"},
		{200, "Content-Type: text/plain; charset=utf-8\nRatelimit-Limit: 1\nRatelimit-Remaining: 0\nRatelimit-Reset: 20", "ok"},
	}
	for name, build := range concurrencyApps {
		t.Run(name, func(t *testing.T) {
			got := story(t, build)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("step %d:\n got %d %q\n%s\nwant %d %q\n%s", i+1, got[i].status, got[i].body, got[i].header, want[i].status, want[i].body, want[i].header)
				}
			}
		})
	}
}
