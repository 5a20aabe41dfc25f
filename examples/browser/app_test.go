package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
)

// build makes an API for the page at origin, its limiter made from base.
type build func(base core.Config, origin string) (http.Handler, error)

// reordered builds the API of newAPI with the limiter before CORS when
// limiterFirst, keyed by client address rather than X-API-Key when
// byAddress, and CORS exposing exposed: the configurations newAPI warns
// against.
func reordered(limiterFirst, byAddress bool, exposed []string) build {
	return func(base core.Config, origin string) (http.Handler, error) {
		lim, err := newLimiter(base)
		if err != nil {
			return nil, err
		}
		c, l := allowPage(origin, exposed), limit(lim)
		if byAddress {
			l = ratelimit.Middleware(lim) // keyfuncs.IP, the default
		}
		if limiterFirst {
			return api(l, c), nil
		}
		return api(c, l), nil
	}
}

// The configurations of issue 25 as a real browser sees them: the page's
// six calls, in a row per field, "null" for what JavaScript could not
// read. Every call carries X-API-Key, so every one is preflighted; the
// limiter before CORS sees the preflights.
var configurations = []struct {
	name                         string
	build                        build
	status, retryAfter, remained string
}{
	{
		name:       "cors first, exposed (newAPI)",
		build:      newAPI,
		status:     "200 200 200 429 429 429",
		retryAfter: "null null null 20 20 20",
		remained:   "2 1 0 0 0 0",
	},
	{
		// The 429s leave without Access-Control-Allow-Origin: the page
		// never learns it was limited.
		name:       "limiter first, exposed",
		build:      reordered(true, false, exposed),
		status:     "200 200 200 TypeError TypeError TypeError",
		retryAfter: "null null null null null null",
		remained:   "2 1 0 null null null",
	},
	{
		name:       "cors first, nothing exposed",
		build:      reordered(false, false, nil),
		status:     "200 200 200 429 429 429",
		retryAfter: "null null null null null null",
		remained:   "null null null null null null",
	},
	{
		name:       "limiter first, nothing exposed",
		build:      reordered(true, false, nil),
		status:     "200 200 200 TypeError TypeError TypeError",
		retryAfter: "null null null null null null",
		remained:   "null null null null null null",
	},
	{
		// A preflight reaches the limiter and carries a client address:
		// were it counted, six would spend two of the three tokens.
		name:       "limiter first, keyed by address, exposed",
		build:      reordered(true, true, exposed),
		status:     "200 200 200 TypeError TypeError TypeError",
		retryAfter: "null null null null null null",
		remained:   "2 1 0 null null null",
	},
}

var exposed = ratelimit.ExposedHeaders(ratelimit.HeadersDraft06)

// A headless Chromium loads the page from one origin and calls the API on
// another, in each configuration. Whatever the order, the preflights
// reach the API, pass the X-API-Key limiter without a 400 and spend no
// token: the limiter decides the six calls only.
func TestChromium(t *testing.T) {
	bin := chromium(t)
	sites := make([]*site, len(configurations))
	for i, c := range configurations {
		sites[i] = serve(t, c.build)
	}
	results := visit(t, bin, sites)
	for i, c := range configurations {
		t.Run(c.name, func(t *testing.T) {
			site, calls := sites[i], results[i]
			if len(calls) != 6 {
				t.Fatalf("the page reported %d calls, want 6: %v", len(calls), calls)
			}
			var status, retryAfter, remained []string
			for _, c := range calls {
				status = append(status, strings.Fields(c.String())[0])
				retryAfter = append(retryAfter, orNull(c.RetryAfter))
				remained = append(remained, orNull(c.Remaining))
			}
			for _, f := range []struct{ field, got, want string }{
				{"status", strings.Join(status, " "), c.status},
				{"Retry-After", strings.Join(retryAfter, " "), c.retryAfter},
				{"RateLimit-Remaining", strings.Join(remained, " "), c.remained},
			} {
				if f.got != f.want {
					t.Errorf("%s: got %s, want %s", f.field, f.got, f.want)
				}
			}
			preflights := site.preflights()
			t.Logf("status %s; Retry-After %s; RateLimit-Remaining %s; preflights answered %v; decisions %d",
				strings.Join(status, " "), strings.Join(retryAfter, " "), strings.Join(remained, " "),
				preflights, site.decisions.Load())
			if got := site.decisions.Load(); got != 6 {
				t.Errorf("the limiter decided %d times, want 6 (the calls; preflights spend nothing)", got)
			}
			if len(preflights) != 6 {
				t.Errorf("the API answered %d preflights, want 6 (one per call)", len(preflights))
			}
			for _, code := range preflights {
				if code != http.StatusOK {
					t.Errorf("a preflight got %d, want 200: %v", code, preflights)
					break
				}
			}
		})
	}
}

// The API answers as the page needs without a browser: a preflight
// without X-API-Key is allowed, and the fourth call's 429 carries CORS
// headers with the rate-limit fields exposed.
func TestAPI(t *testing.T) {
	t.Parallel()
	site := serve(t, newAPI)
	send := func(method string, header http.Header) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, site.api+"/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		req.Header.Set("Origin", site.page)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	preflight := http.Header{"Access-Control-Request-Method": {"GET"}, "Access-Control-Request-Headers": {"x-api-key"}}
	if res := send(http.MethodOptions, preflight); res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != site.page {
		t.Fatalf("preflight: %d, Access-Control-Allow-Origin %q; want 200, %q",
			res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"), site.page)
	}
	var res *http.Response
	for range 4 {
		res = send(http.MethodGet, http.Header{"X-Api-Key": {"demo-key"}})
	}
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth call: %d, want 429", res.StatusCode)
	}
	for field, want := range map[string]string{
		"Access-Control-Allow-Origin":   site.page,
		"Access-Control-Expose-Headers": "Ratelimit-Limit, Ratelimit-Remaining, Ratelimit-Reset, Ratelimit-Policy, Retry-After",
		"Retry-After":                   "20",
	} {
		if got := res.Header.Get(field); got != want {
			t.Errorf("fourth call's %s: got %q, want %q", field, got, want)
		}
	}
	if got := site.decisions.Load(); got != 4 {
		t.Errorf("decisions: got %d, want 4", got)
	}
}

// site is a page and its API, each on a loopback port of its own (two
// origins), the API's limits in a miniredis whose clock stands still.
type site struct {
	page, api string         // origins
	reports   chan []call    // what the page posts back
	decisions *decisionCount // the limiter's decisions
	mu        sync.Mutex     // guards answered
	answered  []int          // the statuses of the preflights the API answered
}

// serve starts the page and the API made by build.
func serve(t *testing.T, build build) *site {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })

	pageSrv, apiSrv := httptest.NewUnstartedServer(nil), httptest.NewUnstartedServer(nil)
	s := &site{
		page:      "http://" + pageSrv.Listener.Addr().String(),
		api:       "http://" + apiSrv.Listener.Addr().String(),
		reports:   make(chan []call, 1),
		decisions: new(decisionCount),
	}
	// A second for each store decision, not the default 50ms, and the
	// scripts loaded and a connection open before the page's first call:
	// under -race on a busy machine miniredis can be slower than that.
	store := core.NewRedisStore(client)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := store.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := build(core.Config{Store: store, Timeout: time.Second, Observer: s.decisions}, s.page)
	if err != nil {
		t.Fatal(err)
	}
	apiSrv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.mu.Lock()
		s.answered = append(s.answered, rec.status)
		s.mu.Unlock()
	})
	pageSrv.Config.Handler = newPage(s.api, func(calls []call) {
		select {
		case s.reports <- calls:
		default: // a second report: the first one counts
		}
	})
	pageSrv.Start()
	apiSrv.Start()
	t.Cleanup(pageSrv.Close)
	t.Cleanup(apiSrv.Close)
	return s
}

// preflights returns the statuses of the preflights the API answered.
func (s *site) preflights() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.answered...)
}

// decisionCount is a core.Observer counting decisions.
type decisionCount struct{ atomic.Int64 }

func (d *decisionCount) Decision(core.DecisionEvent) { d.Add(1) }
func (d *decisionCount) BreakerChange(string, bool)  {}

// statusRecorder records the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// chromium returns the Chromium to drive; without one the test is
// skipped, unless RATELIMIT_REQUIRE_CHROMIUM=1 (CI).
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a browser; skipped with -short")
	}
	bin, err := exec.LookPath("/usr/bin/chromium")
	if err != nil {
		bin, err = exec.LookPath("chromium")
	}
	if err != nil {
		if os.Getenv("RATELIMIT_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("RATELIMIT_REQUIRE_CHROMIUM=1 but no chromium: %v", err)
		}
		t.Skip("no chromium (Debian: apt-get install chromium); set RATELIMIT_REQUIRE_CHROMIUM=1 to fail instead")
	}
	return bin
}

// visit opens the sites' pages side by side, each in a frame of one
// page, in a headless Chromium of its own (one browser start, not one per
// site), and returns the calls each page posted, once all have.
func visit(t *testing.T, bin string, sites []*site) [][]call {
	t.Helper()
	frames := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, s := range sites {
			fmt.Fprintf(w, "<iframe src=%q></iframe>\n", s.page+"/")
		}
	}))
	defer frames.Close()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		// What a headless browser on a closed network needs: no sandbox
		// (containers), no GPU, and nothing that calls home.
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run",
		"--user-data-dir="+t.TempDir(),
		frames.URL)
	// Chromium leaves a directory (its singleton socket) in TMPDIR.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Stop it as a user would, so that it ends its helper processes
	// before the profile directory is removed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	results := make([][]call, len(sites))
	for i, s := range sites {
		select {
		case results[i] = <-s.reports:
		case <-ctx.Done():
			cancel()
			_ = cmd.Wait()
			t.Fatalf("%s posted no results within a minute; chromium said:\n%s", s.page, out.String())
		}
	}
	cancel()
	_ = cmd.Wait() // the exit status of a browser stopped by a signal tells nothing
	return results
}
