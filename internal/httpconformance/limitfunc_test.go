package httpconformance_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// TestLimitFuncThreeTenants: WithLimitFunc decides each tenant under its
// own quota, read per request, in one limiter's buckets on real Redis,
// through every adapter; the header fields show the tenant's limit, and
// an unknown tenant or a bad quota is the ErrorHandler's 500, never a
// default limit (issue 22).
func TestLimitFuncThreeTenants(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { c.Close() })
	quotas := map[string]core.Limit{"free": core.PerMinute(2), "team": core.PerMinute(3), "pro": core.PerMinute(5), "broken": {}}
	quota := func(r *http.Request) (core.Limit, error) {
		l, ok := quotas[r.Header.Get("X-Tenant")]
		if !ok {
			return core.Limit{}, errors.New("no such tenant")
		}
		return l, nil
	}
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			t.Parallel()
			store := core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
			lim, err := core.New(core.Config{Store: store, Name: "tenants", Limit: core.PerMinute(1), FailMode: core.FailClosed, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			h := ad.build(app{global: &mw{lim: lim, opts: []nethttp.Option{
				nethttp.WithKey(keyfuncs.Header("X-Tenant")), nethttp.WithLimitFunc(quota),
			}}}, ad)
			send := func(tenant string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodGet, "/login", nil)
				r.Header.Set("X-Tenant", tenant)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			for _, tenant := range []string{"free", "team", "pro"} {
				capacity := quotas[tenant].Burst
				if capacity == 0 {
					capacity = quotas[tenant].Rate
				}
				for i := range capacity + 1 {
					w := send(tenant)
					want := http.StatusOK
					if i == capacity {
						want = http.StatusTooManyRequests
					}
					if w.Code != want || w.Header().Get("RateLimit-Limit") != strconv.Itoa(capacity) {
						t.Fatalf("%s, request %d: %d, RateLimit-Limit %q; want %d, %d",
							tenant, i+1, w.Code, w.Header().Get("RateLimit-Limit"), want, capacity)
					}
				}
			}
			for _, tenant := range []string{"nobody", "broken"} {
				if w := send(tenant); w.Code != http.StatusInternalServerError {
					t.Errorf("%s: %d, want 500", tenant, w.Code)
				}
			}
		})
	}
}

// TestLimitFuncKeepsRouteLimit: a route's own limiter (WithRoutes) keeps
// its stricter limit when WithLimitFunc gives every other request a
// tenant's plan, in every adapter (issue 36 item 8: 20 of 20 exports
// passed under the plan's 600 a minute).
func TestLimitFuncKeepsRouteLimit(t *testing.T) {
	t.Parallel()
	plan := func(*http.Request) (core.Limit, error) { return core.PerMinute(600), nil }
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			t.Parallel()
			e := &env{t: t, clk: limitertest.NewClock()}
			def := e.config(core.Config{Store: core.NewMemoryStore(core.WithClock(e.clk.Now)), Name: "plans", Limit: core.PerMinute(60), FailMode: core.FailOpen})
			export := e.config(core.Config{Store: core.NewMemoryStore(core.WithClock(e.clk.Now)), Name: "export", Limit: core.PerMinute(5), FailMode: core.FailOpen})
			h := ad.build(app{global: &mw{lim: def, opts: []nethttp.Option{nethttp.WithLimitFunc(plan)},
				routes: map[string]*core.Limiter{"GET " + routeLogin: export}}}, ad)
			passed, limits := 0, map[string]int{}
			for range 20 {
				w := serve(h, step{path: routeLogin})
				if w.Code == http.StatusOK {
					passed++
				}
				limits[w.Header().Get("RateLimit-Limit")]++
			}
			if len(limits) != 1 || limits["5"] != 20 {
				t.Errorf("exports: RateLimit-Limit %v, want the route's 5 on all 20", limits)
			}
			t.Logf("%d of 20 exports passed; RateLimit-Limit %v", passed, limits)
			if passed != 5 {
				t.Errorf("%d of 20 exports passed; the route's limit is 5 a minute", passed)
			}
			if got := serve(h, step{}).Header().Get("RateLimit-Limit"); got != "600" {
				t.Errorf("another route: RateLimit-Limit %q, want the plan's 600", got)
			}
		})
	}
}
