package nethttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// alsoSetup is a per-client limiter (3 a minute) and a per-tenant one
// (5 a minute) on one memory store, at a fixed time.
type alsoSetup struct {
	client, tenant *core.Limiter
	store          core.Store
	clk            *limitertest.Clock
}

func newAlsoSetup(t *testing.T) *alsoSetup {
	t.Helper()
	clk := limitertest.NewClock()
	store := core.NewMemoryStore(core.WithClock(clk.Now))
	return &alsoSetup{
		clk:    clk,
		store:  store,
		client: limitertest.New(t, core.Config{Store: store, Name: "client", Limit: core.PerMinute(3), FailMode: core.FailOpen}),
		tenant: limitertest.New(t, core.Config{Store: store, Name: "tenant", Limit: core.PerMinute(5), FailMode: core.FailOpen}),
	}
}

// remaining is what the bucket of l holds now for the key a request
// with key as tenant, or from key as client address, gets.
func remaining(t *testing.T, l *core.Limiter, key string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = key + ":1234"
	r.Header.Set("X-Tenant", key)
	k, err := keyfuncs.Header("X-Tenant")(r)
	if strings.HasPrefix(key, "192.") {
		k, err = keyfuncs.IP()(r)
	} else if strings.Contains(key, ":") {
		k = key // a key given to ServeKey
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Peek(context.Background(), k, 1)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// getFrom sends GET / from client addr, with tenant in X-Tenant when not "".
func getFrom(h http.Handler, addr, tenant string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = addr + ":1234"
	if tenant != "" {
		r.Header.Set("X-Tenant", tenant)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestWithAlsoAllOrNothing: a request is decided by its client's bucket
// and its tenant's in one call; a refusal by either takes nothing from
// the other, and a key error of the tenant's key takes nothing at all.
func TestWithAlsoAllOrNothing(t *testing.T) {
	t.Parallel()
	s := newAlsoSetup(t)
	h := Middleware(s.client, WithAlso(s.tenant, keyfuncs.Header("X-Tenant")))(okHandler)

	// Client A spends its 3; the tenant has 2 left.
	for i := range 3 {
		if w := getFrom(h, "192.0.2.1", "acme"); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i+1, w.Code)
		}
	}
	// Refused by the client's own limit: the tenant is not charged.
	w := getFrom(h, "192.0.2.1", "acme")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request of A: %d, want 429", w.Code)
	}
	if got := remaining(t, s.tenant, "acme"); got != 2 {
		t.Errorf("tenant after a refusal by the client's limit: %d left, want 2", got)
	}
	// Client B spends the tenant's last 2; then the tenant refuses, and B's
	// own bucket is not charged.
	for range 2 {
		if w := getFrom(h, "192.0.2.2", "acme"); w.Code != http.StatusOK {
			t.Fatalf("B: %d, want 200", w.Code)
		}
	}
	w = getFrom(h, "192.0.2.2", "acme")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("RateLimit-Limit") != "5" {
		t.Fatalf("B over the tenant's quota: %d, RateLimit-Limit %q; want 429 with the tenant's 5", w.Code, w.Header().Get("RateLimit-Limit"))
	}
	if got := remaining(t, s.client, "192.0.2.2"); got != 1 {
		t.Errorf("client B after a refusal by the tenant: %d left, want 1", got)
	}
	// No tenant header: 400, as WithKey's key error; nothing taken.
	w = getFrom(h, "192.0.2.3", "")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "X-Tenant") {
		t.Fatalf("no tenant: %d %q, want 400 naming X-Tenant", w.Code, w.Body)
	}
	if got := remaining(t, s.client, "192.0.2.3"); got != 3 {
		t.Errorf("client C after its key error: %d left, want 3", got)
	}
}

// TestWithAlsoHeaders: the fields describe the binding result and
// RateLimit-Policy lists both limiters' policies, in every style.
func TestWithAlsoHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		style HeaderStyle
		want  []map[string]string // after request 1, and after the 4th (refused by the client)
	}{
		{HeadersDraft06, []map[string]string{
			{"Ratelimit-Limit": "3", "Ratelimit-Remaining": "2", "Ratelimit-Reset": "20", "Ratelimit-Policy": "3;w=60, 5;w=60"},
			{"Ratelimit-Limit": "3", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "20", "Ratelimit-Policy": "3;w=60, 5;w=60", "Retry-After": "20"},
		}},
		{HeadersDraft11, []map[string]string{
			{"Ratelimit-Policy": `"client";q=3;w=60, "tenant";q=5;w=60`, "Ratelimit": `"client";r=2;t=20, "tenant";r=4;t=12`},
			{"Ratelimit-Policy": `"client";q=3;w=60, "tenant";q=5;w=60`, "Ratelimit": `"client";r=0;t=20, "tenant";r=2;t=36`, "Retry-After": "20"},
		}},
		{HeadersLegacy, []map[string]string{
			{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": "*"},
			{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "*", "Retry-After": "20"},
		}},
		{HeadersNone, []map[string]string{{}, {"Retry-After": "20"}}},
	} {
		t.Run(c.style.String(), func(t *testing.T) {
			t.Parallel()
			s := newAlsoSetup(t)
			h := Middleware(s.client, WithHeaders(c.style), WithAlso(s.tenant, keyfuncs.Header("X-Tenant")))(okHandler)
			var got []http.Header
			for range 4 {
				got = append(got, getFrom(h, "192.0.2.1", "acme").Header())
			}
			for i, g := range []http.Header{got[0], got[3]} {
				delete(g, "Content-Type")
				delete(g, "X-Content-Type-Options")
				wantHeader(t, g, c.want[i])
			}
		})
	}
}

// TestWithAlsoBindingIsTheTenant: the binding result is the check with
// the fewest tokens left for its burst, so the fields are the tenant's
// once it has less left than the client.
func TestWithAlsoBindingIsTheTenant(t *testing.T) {
	t.Parallel()
	s := newAlsoSetup(t)
	h := Middleware(s.client, WithAlso(s.tenant, keyfuncs.Header("X-Tenant")))(okHandler)
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		getFrom(h, ip, "acme")
	}
	w := getFrom(h, "192.0.2.4", "acme") // client 2 of 3 left, tenant 1 of 5
	if got := w.Header().Get("RateLimit-Limit") + " " + w.Header().Get("RateLimit-Remaining"); got != "5 1" {
		t.Errorf("RateLimit-Limit, -Remaining: %q, want the tenant's \"5 1\"", got)
	}
}

// limiter is another limiter on s's store.
func (s *alsoSetup) limiter(t *testing.T, name string, lim core.Limit) *core.Limiter {
	t.Helper()
	return limitertest.New(t, core.Config{Store: s.store, Name: name, Limit: lim, FailMode: core.FailOpen})
}

var (
	tenantKey = keyfuncs.Header("X-Tenant")
	everyone  = func(*http.Request) (string, error) { return "*", nil }
)

// TestWithAlsoSeveral: a client's limit, its tenant's and a global
// ceiling in one call; the ceiling's refusal takes nothing from the
// others, and RateLimit-Policy lists the three.
func TestWithAlsoSeveral(t *testing.T) {
	t.Parallel()
	s := newAlsoSetup(t)
	global := s.limiter(t, "global", core.PerMinute(4))
	h := Middleware(s.client, WithAlso(s.tenant, tenantKey), WithAlso(global, everyone))(okHandler)
	ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"}
	for i, ip := range ips {
		w := getFrom(h, ip, "acme")
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if w.Code != want {
			t.Errorf("request %d: %d, want %d", i+1, w.Code, want)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != "3;w=60, 5;w=60, 4;w=60" {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if i == 4 && (w.Header().Get("Retry-After") != "15" || w.Header().Get("RateLimit-Limit") != "4") {
			t.Errorf("refused by the ceiling: Retry-After %q, RateLimit-Limit %q; want the ceiling's 15, 4",
				w.Header().Get("Retry-After"), w.Header().Get("RateLimit-Limit"))
		}
	}
	if c, tn := remaining(t, s.client, ips[4]), remaining(t, s.tenant, "acme"); c != 3 || tn != 1 {
		t.Errorf("after the ceiling's refusal: client %d, tenant %d left; want 3, 1", c, tn)
	}
}

// serveStatus serves h with a handler answering status.
func statusHandler(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
}

// TestWithAlsoWithOptions: WithAlso applies with every option of the
// Gate, on every path.
func TestWithAlsoWithOptions(t *testing.T) {
	t.Parallel()
	t.Run("dry run", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		var dry []bool
		h := Middleware(s.client, WithAlso(s.tenant, tenantKey), WithDryRun(),
			WithObserver(func(_ *http.Request, res core.Result, _ error, dryRun bool) {
				dry = append(dry, !res.Allowed && dryRun && len(res.Policies) == 2)
			}))(okHandler)
		for i := range 6 {
			if w := getFrom(h, "192.0.2."+string(rune('1'+i)), "acme"); w.Code != http.StatusOK || w.Header().Get("Retry-After") != "" {
				t.Errorf("request %d: %d, Retry-After %q; want 200 without", i+1, w.Code, w.Header().Get("Retry-After"))
			}
		}
		if len(dry) != 6 || !dry[5] || dry[4] {
			t.Errorf("observed would-deny %v; want the 6th only", dry)
		}
	})
	t.Run("count if", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		h := Middleware(s.client, WithAlso(s.tenant, tenantKey),
			WithCountIf(func(_ *http.Request, status int) bool { return status < 500 }))(statusHandler(http.StatusBadGateway))
		getFrom(h, "192.0.2.1", "acme")
		if c, tn := remaining(t, s.client, "192.0.2.1"), remaining(t, s.tenant, "acme"); c != 3 || tn != 5 {
			t.Errorf("after a response that does not count: client %d, tenant %d left; want 3, 5", c, tn)
		}
	})
	t.Run("limit func", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		h := Middleware(s.client, WithAlso(s.tenant, tenantKey),
			WithLimitFunc(func(*http.Request) (core.Limit, error) { return core.PerMinute(10), nil }))(okHandler)
		w := getFrom(h, "192.0.2.1", "acme")
		if got := w.Header().Get("RateLimit-Policy"); got != "10;w=60, 5;w=60" {
			t.Errorf("RateLimit-Policy %q, want the request's limit and the tenant's", got)
		}
		if got := remaining(t, s.tenant, "acme"); got != 4 {
			t.Errorf("tenant: %d left, want 4", got)
		}
	})
	t.Run("routes", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		login := s.limiter(t, "login", core.PerMinute(2))
		mux := http.NewServeMux()
		mux.Handle("GET /login", okHandler)
		mux.Handle("GET /", okHandler)
		h := Middleware(s.client, WithAlso(s.tenant, tenantKey),
			WithRoutes(map[string]*core.Limiter{"GET /login": login}))(mux)
		r := httptest.NewRequest(http.MethodGet, "/login", nil)
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("RateLimit-Policy"); got != "2;w=60, 5;w=60" {
			t.Errorf("RateLimit-Policy %q, want the route's and the tenant's", got)
		}
	})
	t.Run("skip and serve key", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		g := NewGate(s.client, WithAlso(s.tenant, tenantKey),
			WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
		r := httptest.NewRequest(http.MethodGet, "/health", nil)
		r.Header.Set("X-Tenant", "acme")
		g.ServeKey(httptest.NewRecorder(), r, "user:1", okHandler)
		r = httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		g.ServeKey(w, r, "user:1", okHandler)
		if w.Code != http.StatusOK || remaining(t, s.client, "user:1") != 2 || remaining(t, s.tenant, "acme") != 4 {
			t.Errorf("ServeKey after a skipped request: %d, user %d, tenant %d left; want 200, 2, 4",
				w.Code, remaining(t, s.client, "user:1"), remaining(t, s.tenant, "acme"))
		}
	})
	t.Run("preflight", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		mux := http.NewServeMux()
		mux.Handle("GET /", okHandler)
		h := Middleware(s.client, WithAlso(s.tenant, tenantKey))(mux)
		r := httptest.NewRequest(http.MethodOptions, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("Origin", "https://app.example")
		r.Header.Set("Access-Control-Request-Method", "GET")
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if len(rateLimitFields(w.Header())) != 0 || remaining(t, s.client, "192.0.2.1") != 3 || remaining(t, s.tenant, "acme") != 5 {
			t.Errorf("a preflight no route serves: fields %v, client %d, tenant %d left; want none, 3, 5",
				rateLimitFields(w.Header()), remaining(t, s.client, "192.0.2.1"), remaining(t, s.tenant, "acme"))
		}
	})
	t.Run("cost", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		for _, n := range []int{0, 4, 6} { // 4: above the client's burst of 3; 6: above the tenant's 5
			var got error
			h := Middleware(s.client, WithAlso(s.tenant, tenantKey), WithCost(func(*http.Request) int { return n }),
				WithObserver(func(_ *http.Request, _ core.Result, err error, _ bool) { got = err }))(okHandler)
			if w := getFrom(h, "192.0.2.1", "acme"); w.Code != http.StatusInternalServerError {
				t.Errorf("cost %d: %d, want WithCost's bug, 500", n, w.Code)
			}
			if !errors.Is(got, core.ErrInvalidCost) && !errors.Is(got, core.ErrCostTooHigh) {
				t.Errorf("cost %d: observed %v, want AllowN's error", n, got)
			}
		}
		if remaining(t, s.client, "192.0.2.1") != 3 || remaining(t, s.tenant, "acme") != 5 {
			t.Error("an invalid cost took tokens")
		}
	})
	t.Run("empty key", func(t *testing.T) {
		t.Parallel()
		s := newAlsoSetup(t)
		var got error
		h := Middleware(s.client, WithAlso(s.tenant, func(*http.Request) (string, error) { return "", nil }),
			WithObserver(func(_ *http.Request, res core.Result, err error, _ bool) {
				if res.Name == "tenant" {
					got = err
				}
			}))(okHandler)
		if w := getFrom(h, "192.0.2.1", "acme"); w.Code != http.StatusInternalServerError {
			t.Errorf("empty tenant key: %d, want 500", w.Code)
		}
		if !errors.Is(got, core.ErrEmptyKey) || remaining(t, s.client, "192.0.2.1") != 3 {
			t.Errorf("observed %v (want core.ErrEmptyKey, named for the tenant's policy); client %d left, want 3", got, remaining(t, s.client, "192.0.2.1"))
		}
	})
}

// TestWithAlsoDegraded: a check the store could not make is decided by
// its limiter's FailMode: FailClosed refuses the whole with 503, and a
// degraded decision sends no rate-limit fields.
func TestWithAlsoDegraded(t *testing.T) {
	t.Parallel()
	down := limitertest.NewDownStore()
	own := limitertest.New(t, core.Config{Store: down, Name: "own", Limit: core.PerMinute(3), FailMode: core.FailOpen, Timeout: time.Second})
	closed := limitertest.New(t, core.Config{Store: down, Name: "closed", Limit: core.PerMinute(5), FailMode: core.FailClosed, Timeout: time.Second})
	for _, c := range []struct {
		name string
		also *core.Limiter
		want int
	}{{"fail closed", closed, http.StatusServiceUnavailable}, {"fail open", own, http.StatusOK}} {
		h := Middleware(own, WithAlso(c.also, everyone))(okHandler)
		w := getFrom(h, "192.0.2.1", "")
		if w.Code != c.want || len(rateLimitFields(w.Header())) != 0 {
			t.Errorf("%s: %d, fields %v; want %d without rate-limit fields", c.name, w.Code, rateLimitFields(w.Header()), c.want)
		}
		if c.want == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After on the 503", c.name)
		}
	}
}

// TestWithAlsoRefused: what cannot serve several checks says so at
// construction.
func TestWithAlsoRefused(t *testing.T) {
	t.Parallel()
	s := newAlsoSetup(t)
	conc, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "slots", Max: 2, Lease: time.Minute, FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	waits := limitertest.New(t, core.Config{Store: s.store, Name: "waits", Limit: core.PerMinute(3), FailMode: core.FailOpen, MaxWait: time.Second})
	elsewhere := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Name: "elsewhere", Limit: core.PerMinute(3), FailMode: core.FailOpen})
	also := WithAlso(s.tenant, tenantKey)
	for name, f := range map[string]func(){
		"another store":            func() { Middleware(elsewhere, also) },
		"another store, WithAlso":  func() { NewGate(s.client, WithAlso(elsewhere, tenantKey)) },
		"another store, WithRoute": func() { NewGate(s.client, also, WithRoutes(map[string]*core.Limiter{"/x": elsewhere})) },
		"nil limiter":              func() { WithAlso(nil, tenantKey) },
		"nil key":                  func() { WithAlso(s.tenant, nil) },
		"WithDelay":                func() { NewGate(waits, WithDelay(time.Second), also) },
		"Concurrency":              func() { Concurrency(conc, also) },
		"Transport":                func() { Transport(s.client, nil, also) },
		"WithDelay, ←":             func() { NewGate(waits, also, WithDelay(time.Second)) },
	} {
		func() {
			defer func() {
				p := recover()
				if p == nil {
					t.Errorf("%s: no panic", name)
				} else if msg := fmt.Sprint(p); strings.HasPrefix(name, "another store") && !strings.Contains(msg, "uses another store than limiter") {
					t.Errorf("%s: panic %q; want it to name the limiters and their stores", name, msg)
				}
			}()
			f()
		}()
	}
	NewGate(s.client, also, WithRoutes(map[string]*core.Limiter{"/x": waits})) // one store: no panic
}
