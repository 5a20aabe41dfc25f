package nethttp

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

func TestDenied429Body(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	h := Middleware(limitertest.NewLimiterClock(t, core.PerMinute(1), clk.Now))(okHandler)
	limitertest.Get(h, "/")
	w := limitertest.Get(h, "/")
	const body = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 60 seconds"}`
	if w.Code != http.StatusTooManyRequests || w.Body.String() != body {
		t.Fatalf("got %d %s, want 429 %s", w.Code, w.Body, body)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": problem, "X-Content-Type-Options": "nosniff", "Retry-After": "60",
		"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "60", "Ratelimit-Policy": "1;w=60",
	})

	// One second from the next token, the detail says "1 second".
	clk.Advance(59*time.Second + time.Millisecond)
	w = limitertest.Get(h, "/")
	if want := `"detail":"rate limit exceeded; retry in 1 second"}`; !strings.HasSuffix(w.Body.String(), want) {
		t.Errorf("body %s, want it to end with %s", w.Body, want)
	}
}

func TestFailClosedDegraded503(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(3), FailMode: core.FailClosed})
	for _, style := range []HeaderStyle{HeadersDraft06, HeadersDraft11, HeadersLegacy, HeadersNone} {
		t.Run(style.String(), func(t *testing.T) {
			w := limitertest.Get(Middleware(l, WithHeaders(style))(okHandler), "/")
			const body = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiting is unavailable; retry in 1 second"}`
			if w.Code != http.StatusServiceUnavailable || w.Body.String() != body {
				t.Fatalf("got %d %s, want 503 %s", w.Code, w.Body, body)
			}
			if strings.Contains(w.Body.String(), "10.1.2.3") {
				t.Fatal("the store's error reached the client")
			}
			wantHeader(t, w.Header(), map[string]string{
				"Content-Type": problem, "X-Content-Type-Options": "nosniff", "Retry-After": "1",
			})
		})
	}
}

func TestFailOpenDegradedSendsNoRateLimitFields(t *testing.T) {
	t.Parallel()
	var seen core.Result
	l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(3), FailMode: core.FailOpen})
	for _, style := range []HeaderStyle{HeadersDraft06, HeadersDraft11, HeadersLegacy, HeadersNone} {
		w := limitertest.Get(Middleware(l, WithHeaders(style), WithObserver(func(_ *http.Request, res core.Result, _ error, _ bool) { seen = res }))(okHandler), "/")
		if w.Code != http.StatusOK || !seen.Degraded {
			t.Fatalf("%v: status %d, degraded %v; want 200 on a degraded decision", style, w.Code, seen.Degraded)
		}
		if f := rateLimitFields(w.Header()); len(f) != 0 || w.Header().Get("Retry-After") != "" {
			t.Errorf("%v: degraded decision sent %v", style, w.Header())
		}
	}
}

func TestKeyErrors(t *testing.T) {
	t.Parallel()
	secret := errors.New("parse 10.0.0.1: secret internal detail")
	tests := []struct {
		name  string
		key   keyfuncs.KeyFunc
		inner error
		body  string
	}{
		{"error", func(*http.Request) (string, error) { return "", secret }, secret,
			`{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing or invalid rate-limit key"}`},
		{"missing header", keyfuncs.Header("X-API-Key"), keyfuncs.ErrMissingHeader,
			`{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: header X-Api-Key is required"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limitertest.NewLimiter(t, core.PerMinute(3))
			w := limitertest.Get(Middleware(l, WithKey(tt.key))(okHandler), "/")
			if w.Code != http.StatusBadRequest || w.Body.String() != tt.body {
				t.Fatalf("got %d %s, want 400 %s", w.Code, w.Body, tt.body)
			}
			if len(rateLimitFields(w.Header())) != 0 || w.Header().Get("Content-Type") != problem {
				t.Errorf("header %v", w.Header())
			}

			var got error
			h := Middleware(l, WithKey(tt.key), WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				got = err
				w.WriteHeader(http.StatusUnauthorized)
			}))(okHandler)
			if w := limitertest.Get(h, "/"); w.Code != http.StatusUnauthorized {
				t.Fatalf("custom error handler: status %d", w.Code)
			}
			if !errors.Is(got, ErrKey) || !errors.Is(got, tt.inner) {
				t.Errorf("error handler got %v; want it to match ErrKey and %v", got, tt.inner)
			}
		})
	}
}

func TestBadCost500(t *testing.T) {
	t.Parallel()
	l := limitertest.NewLimiter(t, core.PerMinute(3))
	for _, cost := range []int{0, 4} {
		w := limitertest.Get(Middleware(l, WithCost(func(*http.Request) int { return cost }))(okHandler), "/")
		const body = `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit could not be applied"}`
		if w.Code != http.StatusInternalServerError || w.Body.String() != body {
			t.Errorf("cost %d: got %d %s, want 500 %s", cost, w.Code, w.Body, body)
		}
	}
	var got error
	limitertest.Get(Middleware(l, WithCost(func(*http.Request) int { return 4 }), WithErrorHandler(func(_ http.ResponseWriter, _ *http.Request, err error) { got = err }))(okHandler), "/")
	if !errors.Is(got, core.ErrCostTooHigh) || errors.Is(got, ErrKey) {
		t.Errorf("error handler got %v, want core.ErrCostTooHigh", got)
	}
}

func TestCost(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	h := Middleware(limitertest.NewLimiterClock(t, core.PerMinute(3), clk.Now), WithCost(func(r *http.Request) int {
		if r.Method == http.MethodPost {
			return 2
		}
		return 1
	}))(okHandler)
	r := func(method string) *http.Request {
		r, _ := http.NewRequest(method, "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		return r
	}
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, r(http.MethodPost))
	if w.status != 200 || w.h.Get("Ratelimit-Remaining") != "1" || w.h.Get("Ratelimit-Reset") != "40" {
		t.Fatalf("POST costing 2: %d %v", w.status, w.h)
	}
	// One token left, two needed: the second is 20 s away.
	w.reset()
	h.ServeHTTP(w, r(http.MethodPost))
	if w.status != 429 || w.h.Get("Retry-After") != "20" {
		t.Fatalf("second POST: %d %v", w.status, w.h)
	}
	w.reset()
	h.ServeHTTP(w, r(http.MethodGet))
	if w.status != 200 || w.h.Get("Ratelimit-Remaining") != "0" {
		t.Fatalf("GET costing 1: %d %v", w.status, w.h)
	}
}

func TestSkip(t *testing.T) {
	t.Parallel()
	h := Middleware(limitertest.NewLimiter(t, core.PerMinute(1)), WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(okHandler)
	limitertest.Get(h, "/")
	if w := limitertest.Get(h, "/"); w.Code != 429 {
		t.Fatalf("status %d, want 429", w.Code)
	}
	for range 3 {
		w := limitertest.Get(h, "/healthz")
		if w.Code != 200 || len(rateLimitFields(w.Header())) != 0 {
			t.Fatalf("skipped request: %d %v", w.Code, w.Header())
		}
	}
	// Skipped requests need no key either.
	h = Middleware(limitertest.NewLimiter(t, core.PerMinute(1)), WithKey(keyfuncs.Header("X-API-Key")), WithSkip(func(*http.Request) bool { return true }))(okHandler)
	if w := limitertest.Get(h, "/"); w.Code != 200 {
		t.Fatalf("skipped request without key: %d", w.Code)
	}
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	var denials, errs int
	observe := WithObserver(func(_ *http.Request, res core.Result, err error, dryRun bool) {
		if !dryRun {
			t.Error("observer told dryRun false in dry-run mode")
		}
		if err != nil {
			errs++
		} else if !res.Allowed {
			denials++
		}
	})
	h := Middleware(limitertest.NewLimiter(t, core.PerMinute(3)), WithDryRun(), observe)(okHandler)
	for range 3 {
		limitertest.Get(h, "/")
	}
	w := limitertest.Get(h, "/")
	if w.Code != 200 || w.Body.String() != "ok" || denials != 1 {
		t.Fatalf("dry run: %d %q, %d denials observed", w.Code, w.Body, denials)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": textPlain, "Ratelimit-Limit": "3", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "20", "Ratelimit-Policy": "3;w=60",
	})

	// Key errors and degraded FailClosed denials do not refuse either.
	h = Middleware(limitertest.NewLimiter(t, core.PerMinute(3)), WithDryRun(), observe, WithKey(keyfuncs.Header("X-API-Key")))(okHandler)
	if w := limitertest.Get(h, "/"); w.Code != 200 || errs != 1 {
		t.Fatalf("dry run key error: %d, %d errors observed", w.Code, errs)
	}
	l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(3), FailMode: core.FailClosed})
	if w := limitertest.Get(Middleware(l, WithDryRun())(okHandler), "/"); w.Code != 200 || len(w.Header()) != 1 {
		t.Fatalf("dry run FailClosed: %d %v", w.Code, w.Header())
	}
}

func TestDenyHandler(t *testing.T) {
	t.Parallel()
	var got core.Result
	h := Middleware(limitertest.NewLimiter(t, core.PerMinute(1)), WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res core.Result) {
		got = res
		if w.Header().Get("Retry-After") != "60" || w.Header().Get("Ratelimit-Limit") != "1" {
			t.Errorf("deny handler ran before the fields were set: %v", w.Header())
		}
		http.Error(w, "slow down", http.StatusTeapot)
	}))(okHandler)
	limitertest.Get(h, "/")
	w := limitertest.Get(h, "/")
	if w.Code != http.StatusTeapot || got.Allowed || got.RetryAfter != time.Minute {
		t.Fatalf("status %d, result %+v", w.Code, got)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	def := limitertest.NewLimiterClock(t, core.PerMinute(3), clk.Now)
	users := limitertest.NewLimiterClock(t, core.PerMinute(2), clk.Now)
	routes := WithRoutes(map[string]*core.Limiter{"GET /users/{id}": users})

	perHandler := http.NewServeMux()
	mw := Middleware(def, routes)
	perHandler.Handle("GET /users/{id}", mw(okHandler))
	perHandler.Handle("GET /", mw(okHandler))

	whole := http.NewServeMux()
	whole.Handle("GET /users/{id}", okHandler)
	whole.Handle("GET /", okHandler)
	wrapped := Middleware(def, routes, WithServeMux(whole))(whole)

	for name, h := range map[string]http.Handler{"per handler": perHandler, "whole mux": wrapped} {
		t.Run(name, func(t *testing.T) {
			ip := "198.51.100." + map[string]string{"per handler": "1", "whole mux": "2"}[name]
			send := func(path string) *httptest.ResponseRecorder {
				r, _ := http.NewRequest(http.MethodGet, path, nil)
				r.RemoteAddr = ip + ":1"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			// /users/1 and /users/2 share the pattern's limit of 2.
			for i, path := range []string{"/users/1", "/users/2", "/users/3"} {
				w := send(path)
				if want := []int{200, 200, 429}[i]; w.Code != want || w.Header().Get("Ratelimit-Limit") != "2" {
					t.Fatalf("%s: %d Limit %q, want %d Limit 2", path, w.Code, w.Header().Get("Ratelimit-Limit"), want)
				}
			}
			// Other paths, each different, share the default limit of 3.
			for i, path := range []string{"/a", "/b/1", "/c?x=1", "/d"} {
				w := send(path)
				if want := []int{200, 200, 200, 429}[i]; w.Code != want || w.Header().Get("Ratelimit-Limit") != "3" {
					t.Fatalf("%s: %d Limit %q, want %d Limit 3", path, w.Code, w.Header().Get("Ratelimit-Limit"), want)
				}
			}
		})
	}

	// Around the whole mux, WithServeMux is not needed: the middleware
	// asks the mux it wraps.
	h := Middleware(limitertest.NewLimiterClock(t, core.PerMinute(3), clk.Now), routes)(whole)
	if w := limitertest.Get(h, "/users/1"); w.Header().Get("Ratelimit-Limit") != "2" {
		t.Errorf("whole mux: Limit %q, want the route's 2", w.Header().Get("Ratelimit-Limit"))
	}
}

func TestLimiterFunc(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	free := limitertest.NewLimiterClock(t, core.PerMinute(3), clk.Now)
	pro := limitertest.New(t, core.Config{Store: core.NewMemoryStore(core.WithClock(clk.Now)), Limit: core.PerMinute(100), FailMode: core.FailOpen, Name: "pro"})
	login := limitertest.NewLimiterClock(t, core.PerMinute(1), clk.Now)
	tiers := WithLimiterFunc(func(r *http.Request) *core.Limiter {
		if r.Header.Get("X-Plan") == "pro" {
			return pro
		}
		return nil
	})
	mux := http.NewServeMux()
	mw := Middleware(free, tiers, WithHeaders(HeadersDraft11), WithRoutes(map[string]*core.Limiter{"POST /login": login}))
	mux.Handle("/", mw(okHandler))
	mux.Handle("POST /login", mw(okHandler))

	tests := []struct {
		plan, path, wantPolicy string
	}{
		{"", "/", `"3-per-1m0s";q=3;w=60`},
		{"pro", "/", `"pro";q=100;w=60`},
		{"pro", "/x", `"pro";q=100;w=60`},
		{"free", "/", `"3-per-1m0s";q=3;w=60`},
	}
	for _, tt := range tests {
		w := limitertest.Get(mux, tt.path, "X-Plan", tt.plan)
		if got := w.Header().Get("Ratelimit-Policy"); got != tt.wantPolicy {
			t.Errorf("plan %q %s: policy %s, want %s", tt.plan, tt.path, got, tt.wantPolicy)
		}
	}
	// A route override wins over the function.
	r, _ := http.NewRequest(http.MethodPost, "/login", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-Plan", "pro")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if got := w.Header().Get("Ratelimit-Policy"); got != `"1-per-1m0s";q=1;w=60` {
		t.Errorf("POST /login: policy %s, want the route's", got)
	}
}

func TestGateBoundsDynamicHeaders(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	var lims []*core.Limiter
	for i := range maxDynamic + 5 {
		lims = append(lims, limitertest.NewLimiterClock(t, core.PerMinute(i+1), clk.Now))
	}
	i := 0
	g := NewGate(limitertest.NewLimiterClock(t, core.PerMinute(1), clk.Now), WithLimiterFunc(func(*http.Request) *core.Limiter { return lims[i] }))
	for i = range lims {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := &discardWriter{h: http.Header{}}
		if !g.Serve(w, r, Chain{Next: func(http.ResponseWriter) int { return 200 }}) || w.h.Get("Ratelimit-Limit") != lims[i].Name()[:strings.IndexByte(lims[i].Name(), '-')] {
			t.Fatalf("limiter %d: %v", i, w.h)
		}
	}
	n := 0
	g.dynamic.Range(func(any, any) bool { n++; return true })
	if n != maxDynamic {
		t.Errorf("%d limiters' headers kept, want %d", n, maxDynamic)
	}
}

func TestNilPanics(t *testing.T) {
	t.Parallel()
	l := limitertest.NewLimiter(t, core.PerMinute(1))
	for name, f := range map[string]func(){
		"nil limiter":         func() { Middleware(nil) },
		"nil option":          func() { Middleware(l, nil) },
		"WithKey":             func() { WithKey(nil) },
		"WithCost":            func() { WithCost(nil) },
		"WithSkip":            func() { WithSkip(nil) },
		"WithDenyHandler":     func() { WithDenyHandler(nil) },
		"WithErrorHandler":    func() { WithErrorHandler(nil) },
		"WithObserver":        func() { WithObserver(nil) },
		"WithLimiterFunc":     func() { WithLimiterFunc(nil) },
		"WithRoutes":          func() { WithRoutes(nil) },
		"WithRoutes nil":      func() { WithRoutes(map[string]*core.Limiter{"/": nil}) },
		"WithServeMux":        func() { WithServeMux(nil) },
		"WithClock":           func() { WithClock(nil) },
		"WithHeaders unknown": func() { WithHeaders(HeadersNone + 1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}

// serveKey is Gate.Serve with a router-native key, as echo's and gin's
// MiddlewareWithKey call it; it reports whether the handler ran.
func serveKey(g *Gate, w http.ResponseWriter, r *http.Request, key func() (string, error)) bool {
	ran := false
	g.Serve(w, r, Chain{Key: key, Next: func(http.ResponseWriter) int { ran = true; return 200 }})
	return ran
}

func TestServeRouterNativeKey(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	g := NewGate(limitertest.NewLimiterClock(t, core.PerMinute(1), clk.Now), WithKey(func(*http.Request) (string, error) {
		t.Fatal("the Gate's KeyFunc ran although the caller gave the key")
		return "", nil
	}), WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	user := func(id string, err error) func() (string, error) {
		return func() (string, error) { return id, err }
	}
	for i, want := range []bool{true, false} {
		w := &discardWriter{h: http.Header{}}
		if got := serveKey(g, w, r, user("user:42", nil)); got != want {
			t.Fatalf("request %d: %v, want %v", i, got, want)
		}
	}
	// Another key has its own bucket; a key error is a 400.
	w := &discardWriter{h: http.Header{}}
	if !serveKey(g, w, r, user("user:43", nil)) {
		t.Fatal("user:43 refused")
	}
	w = &discardWriter{h: http.Header{}}
	if serveKey(g, w, r, user("", errors.New("no user"))) || w.status != 400 {
		t.Fatalf("key error: status %d", w.status)
	}
	// A skipped request gets no key: the function does not run.
	health, _ := http.NewRequest(http.MethodGet, "/health", nil)
	if !serveKey(g, &discardWriter{h: http.Header{}}, health, func() (string, error) {
		t.Error("key computed for a skipped request")
		return "", nil
	}) {
		t.Error("skipped request refused")
	}
}

// TestServeKey limits inside a handler, by a username the handler read
// from the body: the same 429, fields and body as the middleware's.
func TestServeKey(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	g := NewGate(limitertest.NewLimiterClock(t, core.PerMinute(2), clk.Now))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := io.ReadAll(r.Body)
		g.ServeKey(w, r, "user:"+string(user), okHandler)
	})
	post := func(user string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(user)))
		return w
	}
	post("alice")
	post("alice")
	w := post("alice")
	const body = `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 30 seconds"}`
	if w.Code != http.StatusTooManyRequests || w.Body.String() != body {
		t.Fatalf("third attempt: %d %s, want 429 %s", w.Code, w.Body, body)
	}
	wantHeader(t, w.Header(), map[string]string{
		"Content-Type": problem, "X-Content-Type-Options": "nosniff", "Retry-After": "30",
		"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "30", "Ratelimit-Policy": "2;w=60",
	})
	if w := post("bob"); w.Code != http.StatusOK || w.Header().Get("Ratelimit-Remaining") != "1" {
		t.Errorf("bob: %d %v", w.Code, w.Header())
	}
	// An empty key is the handler's bug, as from a KeyFunc: 500.
	w = httptest.NewRecorder()
	g.ServeKey(w, httptest.NewRequest(http.MethodPost, "/login", nil), "", okHandler)
	if w.Code != http.StatusInternalServerError {
		t.Errorf("empty key: %d, want 500", w.Code)
	}
}

// TestOverTheWire checks a refusal through a real server: net/http sets
// Content-Length from the single write.
func TestOverTheWire(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Middleware(limitertest.NewLimiter(t, core.PerMinute(1)))(okHandler))
	defer srv.Close()
	var last *http.Response
	for range 2 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp
		if resp.StatusCode == http.StatusTooManyRequests && resp.ContentLength != int64(len(body)) {
			t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
		}
	}
	if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") != "60" || last.Header.Get("RateLimit-Policy") != "1;w=60" {
		t.Errorf("second request: %d %v", last.StatusCode, last.Header)
	}
}

// TestFailLocalDegraded checks FailLocal's in-process decisions: no
// rate-limit fields (the numbers are an instance's share, not the shared
// limit's), and a refusal is a real, approximate limit: 429 with
// Retry-After, not the blanket 503 of FailClosed.
func TestFailLocalDegraded(t *testing.T) {
	t.Parallel()
	l := limitertest.New(t, core.Config{Store: limitertest.NewDownStore(), Limit: core.PerMinute(1), FailMode: core.FailLocal, Instances: 1})
	h := Middleware(l)(okHandler)
	w := limitertest.Get(h, "/")
	if w.Code != http.StatusOK || len(rateLimitFields(w.Header())) != 0 {
		t.Fatalf("first request: %d %v", w.Code, w.Header())
	}
	w = limitertest.Get(h, "/")
	if w.Code != http.StatusTooManyRequests || len(rateLimitFields(w.Header())) != 0 || w.Header().Get("Retry-After") != "60" {
		t.Fatalf("second request: %d %v", w.Code, w.Header())
	}
}

// TestServeKeyCountIf: WithCountIf applies inside a handler too (issue
// 23.1): six successful logins under PerHour(5) all get in, and only the
// failures count.
func TestServeKeyCountIf(t *testing.T) {
	t.Parallel()
	g := NewGate(limitertest.NewLimiter(t, core.PerHour(5)),
		WithCountIf(func(_ *http.Request, status int) bool { return status >= 400 }))
	login := func(ok bool) int {
		w := httptest.NewRecorder()
		g.ServeKey(w, httptest.NewRequest(http.MethodPost, "/login", nil), "user:alice", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !ok {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
		return w.Code
	}
	for i := range 6 {
		if got := login(true); got != http.StatusOK {
			t.Fatalf("successful login %d: %d, want 200", i+1, got)
		}
	}
	for i := range 5 {
		if got := login(false); got != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, got)
		}
	}
	if got := login(true); got != http.StatusTooManyRequests {
		t.Fatalf("after 5 failures: %d, want 429", got)
	}
}

// TestLimitFuncCountIf: a request decided under WithLimitFunc's limit is
// given back under that limit, so successes never use up a tenant's
// quota, and failures do.
func TestLimitFuncCountIf(t *testing.T) {
	t.Parallel()
	h := Middleware(limitertest.NewLimiter(t, core.PerMinute(100)),
		WithLimitFunc(func(*http.Request) (core.Limit, error) { return core.PerMinute(2), nil }),
		WithCountIf(func(_ *http.Request, status int) bool { return status >= 400 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("ok") != "1" {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
	for i, c := range []struct {
		target string
		want   int
	}{{"/?ok=1", 200}, {"/?ok=1", 200}, {"/?ok=1", 200}, {"/", 401}, {"/", 401}, {"/?ok=1", 429}} {
		if w := limitertest.Get(h, c.target); w.Code != c.want || w.Header().Get("Ratelimit-Limit") != "2" {
			t.Fatalf("request %d: %d %v, want %d under the limit of 2", i+1, w.Code, w.Header(), c.want)
		}
	}
}

// TestEmptyKeyIsTheServers500: a KeyFunc returning "" with no error is
// the server's bug (issue 23.7): 500 and a log line, not a 400 blaming
// the client, and never one bucket shared by everyone.
func TestEmptyKeyIsTheServers500(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	h := Middleware(limitertest.NewLimiter(t, core.PerMinute(3)), WithLogger(slog.New(slog.NewTextHandler(&log, nil))),
		WithKey(func(*http.Request) (string, error) { return "", nil }))(okHandler)
	for range 5 {
		if w := limitertest.Get(h, "/"); w.Code != http.StatusInternalServerError {
			t.Fatalf("empty key: %d, want 500", w.Code)
		}
	}
	if !strings.Contains(log.String(), `kind="empty key"`) {
		t.Errorf("logged %q, want a line of kind \"empty key\"", log.String())
	}
}
