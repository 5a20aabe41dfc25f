package httpconformance_test

import (
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

var (
	perMinute3 = core.PerMinute(3) // a token every 20 s
	policy3    = "3;w=60"
	problemCT  = map[string]string{"Content-Type": "application/problem+json", "X-Content-Type-Options": "nosniff"}
)

// merge returns the union of the maps, later ones winning.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func apiKey(v string) []string { return []string{"X-API-Key", v} }

var cases = []tcase{
	{
		name: "draft06/allowed then denied then refilled",
		app:  func(e *env) app { return global(e.limiter(perMinute3)) },
		steps: []step{
			{status: 200, body: body, want: d06("3", "2", "20", policy3, "")},
			{status: 200, body: body, want: d06("3", "1", "40", policy3, "")},
			{status: 200, body: body, want: d06("3", "0", "60", policy3, "")},
			{status: 429, body: problem429("20 seconds"), want: merge(d06("3", "0", "20", policy3, "20"), problemCT)},
			{status: 429, advance: 19 * time.Second, want: d06("3", "0", "1", policy3, "1"), body: problem429("1 second")},
			{status: 200, advance: time.Second, body: body, want: d06("3", "0", "60", policy3, "")},
		},
	},
	{
		name: "draft11/allowed then denied",
		app:  func(e *env) app { return global(e.limiter(perMinute3), nethttp.WithHeaders(nethttp.HeadersDraft11)) },
		steps: []step{
			{status: 200, want: with(noFields, "RateLimit-Policy", `"3-per-1m0s";q=3;w=60`, "RateLimit", `"3-per-1m0s";r=2;t=20`)},
			{status: 200, want: with(noFields, "RateLimit-Policy", "*", "RateLimit", `"3-per-1m0s";r=1;t=40`)},
			{status: 200, want: with(noFields, "RateLimit-Policy", "*", "RateLimit", `"3-per-1m0s";r=0;t=60`)},
			{status: 429, body: problem429("20 seconds"), want: with(noFields, "RateLimit-Policy", `"3-per-1m0s";q=3;w=60`, "RateLimit", `"3-per-1m0s";r=0;t=20`, "Retry-After", "20")},
		},
	},
	{
		name: "legacy/reset as Unix seconds",
		app: func(e *env) app {
			return global(e.limiter(perMinute3), nethttp.WithHeaders(nethttp.HeadersLegacy))
		},
		steps: []step{
			{status: 200, want: with(noFields, "X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "2", "X-RateLimit-Reset", unixIn(20))},
			{status: 200, want: with(noFields, "X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", unixIn(40))},
			{status: 200, want: with(noFields, "X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unixIn(60))},
			{status: 429, body: problem429("20 seconds"), want: with(noFields, "X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unixIn(20), "Retry-After", "20")},
		},
	},
	{
		name: "none/Retry-After only",
		app: func(e *env) app {
			return global(e.limiter(core.PerMinute(1)), nethttp.WithHeaders(nethttp.HeadersNone))
		},
		steps: []step{
			{status: 200, body: body, want: noFields},
			{status: 429, body: problem429("60 seconds"), want: with(noFields, "Retry-After", "60")},
		},
	},
	{
		name: "draft06/sub-second refill rounds up",
		app: func(e *env) app {
			return global(e.limiter(core.Limit{Rate: 10, Period: time.Second, Burst: 2}))
		},
		steps: []step{
			{status: 200, want: d06("2", "1", "1", "2;w=1", "")},
			{status: 200, want: d06("2", "0", "1", "2;w=1", "")},
			{status: 429, body: problem429("1 second"), want: d06("2", "0", "1", "2;w=1", "1")},
			{status: 200, advance: 100 * time.Millisecond, want: d06("2", "0", "1", "2;w=1", "")},
		},
	},
	{
		name: "store down/FailClosed is 503 without rate-limit fields",
		app:  func(e *env) app { return global(e.down(perMinute3, core.FailClosed)) },
		steps: []step{
			{status: 503, body: problem503("1 second"), want: merge(with(noFields, "Retry-After", "1"), problemCT)},
			{status: 503, body: problem503("1 second"), want: with(noFields, "Retry-After", "1")},
		},
	},
	{
		name: "store down/FailClosed with draft11 sends no fields either",
		app: func(e *env) app {
			return global(e.down(perMinute3, core.FailClosed), nethttp.WithHeaders(nethttp.HeadersDraft11))
		},
		steps: []step{
			{status: 503, body: problem503("1 second"), want: with(noFields, "RateLimit", "", "RateLimit-Policy", "", "Retry-After", "1")},
		},
	},
	{
		name: "store down/FailOpen allows without fields",
		app:  func(e *env) app { return global(e.down(perMinute3, core.FailOpen)) },
		steps: []step{
			{status: 200, body: body, want: noFields},
			{status: 200, body: body, want: noFields},
			{status: 200, body: body, want: noFields},
			{status: 200, body: body, want: noFields},
		},
	},
	{
		name: "store down/FailLocal decides in-process, 429 without rate-limit fields",
		app:  func(e *env) app { return global(e.down(core.PerMinute(1), core.FailLocal)) },
		steps: []step{
			{status: 200, body: body, want: noFields},
			{status: 429, want: merge(with(noFields, "Retry-After", "60"), problemCT)},
		},
	},
	{
		name: "keys/missing API key is 400",
		app:  func(e *env) app { return global(e.limiter(perMinute3), nethttp.WithKey(keyfuncs.Header("X-API-Key"))) },
		steps: []step{
			{status: 400, body: problem400NoKey, want: merge(noFields, problemCT)},
			{status: 400, body: problem400TwoKey, header: []string{"X-API-Key", "a", "X-API-Key", "b"}, want: noFields},
			{status: 200, body: body, header: apiKey("k1"), want: d06("3", "2", "20", policy3, "")},
		},
	},
	{
		name: "keys/empty key is the server's 500, never a shared bucket",
		app: func(e *env) app {
			return global(e.limiter(perMinute3), nethttp.WithKey(func(*http.Request) (string, error) { return "", nil }))
		},
		steps: []step{
			{status: 500, body: problem500, want: noFields},
			{status: 500, body: problem500, want: noFields},
		},
	},
	{
		name: "keys/one bucket per API key",
		app: func(e *env) app {
			return global(e.limiter(core.PerMinute(1)), nethttp.WithKey(keyfuncs.Header("X-API-Key")))
		},
		steps: []step{
			{status: 200, header: apiKey("alice"), want: d06("1", "0", "60", "1;w=60", "")},
			{status: 429, header: apiKey("alice"), want: d06("1", "0", "60", "1;w=60", "60")},
			{status: 200, header: apiKey("bob"), want: d06("1", "0", "60", "1;w=60", "")},
		},
	},
	{
		name: "keys/client IP, IPv6 by /64",
		app:  func(e *env) app { return global(e.limiter(core.PerMinute(1))) },
		steps: []step{
			{status: 200, remote: "[2001:db8:1:2::1]:40000", want: d06("1", "0", "60", "1;w=60", "")},
			{status: 429, remote: "[2001:db8:1:2::ffff]:40001", want: d06("1", "0", "60", "1;w=60", "60")},
			{status: 200, remote: "[::ffff:192.0.2.9]:1", want: d06("1", "0", "60", "1;w=60", "")},
			{status: 429, remote: "192.0.2.9:2", want: d06("1", "0", "60", "1;w=60", "60")},
			{status: 400, remote: "@unix", body: problem400Addr, want: noFields},
		},
	},
	{
		name: "keys/user from the request context",
		app: func(e *env) app {
			a := global(e.limiter(core.PerMinute(1)), nethttp.WithKey(keyfuncs.ContextUser()))
			return a
		},
		steps: []step{
			// No authentication middleware in front: no user, 400.
			{status: 400, body: problem400User, want: noFields},
		},
	},
	{
		name: "skip/health checks get nothing",
		app: func(e *env) app {
			return global(e.limiter(core.PerMinute(1)), nethttp.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
		},
		steps: []step{
			{path: "/health", status: 200, body: body, want: noFields},
			{status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/health", status: 200, body: body, want: noFields},
			{status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/health", status: 200, body: body, want: noFields},
		},
	},
	{
		name: "dry run/fields but no denial",
		app:  func(e *env) app { return global(e.limiter(core.PerMinute(1)), nethttp.WithDryRun()) },
		steps: []step{
			{status: 200, body: body, want: d06("1", "0", "60", "1;w=60", "")},
			{status: 200, body: body, want: d06("1", "0", "60", "1;w=60", "")},
			{status: 200, body: body, advance: 30 * time.Second, want: d06("1", "0", "30", "1;w=60", "")},
		},
	},
	{
		name: "dry run/key errors pass too",
		app: func(e *env) app {
			return global(e.limiter(perMinute3), nethttp.WithDryRun(), nethttp.WithKey(keyfuncs.Header("X-API-Key")))
		},
		steps: []step{
			{status: 200, body: body, want: noFields},
		},
	},
	{
		name: "cost/per request",
		app: func(e *env) app {
			return global(e.limiter(core.PerMinute(5)), nethttp.WithCost(func(r *http.Request) int {
				if r.URL.Path == "/login" {
					return 2
				}
				return 1
			}))
		},
		steps: []step{
			{path: "/login", status: 200, want: d06("5", "3", "24", "5;w=60", "")},
			{status: 200, want: d06("5", "2", "36", "5;w=60", "")},
			{path: "/login", status: 200, want: d06("5", "0", "60", "5;w=60", "")},
			{path: "/login", status: 429, advance: 12 * time.Second, want: d06("5", "1", "12", "5;w=60", "12"), body: problem429("12 seconds")},
			{status: 200, want: d06("5", "0", "60", "5;w=60", "")},
		},
	},
	{
		name: "cost/above the burst is 500",
		app: func(e *env) app {
			return global(e.limiter(perMinute3), nethttp.WithCost(func(*http.Request) int { return 4 }))
		},
		steps: []step{
			{status: 500, body: problem500, want: merge(noFields, problemCT)},
		},
	},
	{
		name: "handlers/custom deny and error handlers",
		app: func(e *env) app {
			return global(e.limiter(core.PerMinute(1)),
				nethttp.WithKey(keyfuncs.Header("X-API-Key")),
				nethttp.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res core.Result) {
					w.Header().Set("Content-Type", "text/plain; charset=utf-8")
					w.WriteHeader(http.StatusTooManyRequests)
					_, _ = io.WriteString(w, "slow down, "+res.Name+"\n")
				}),
				nethttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
					w.Header().Set("WWW-Authenticate", "ApiKey")
					w.WriteHeader(http.StatusUnauthorized)
				}))
		},
		steps: []step{
			{status: 200, header: apiKey("k"), want: d06("1", "0", "60", "1;w=60", "")},
			{status: 429, header: apiKey("k"), body: "slow down, 1-per-1m0s\n", want: with(d06("1", "0", "60", "1;w=60", "60"), "Content-Type", "text/plain; charset=utf-8")},
			{status: 401, want: with(noFields, "Www-Authenticate", "ApiKey")},
		},
	},
	{
		name: "multiple limits/the binding one is reported",
		app: func(e *env) app {
			return global(e.config(core.Config{
				Store:    core.NewMemoryStore(core.WithClock(e.clk.Now)),
				Limit:    core.PerSecond(10),
				Extra:    []core.NamedLimit{{Name: "per-minute", Limit: perMinute3}},
				FailMode: core.FailOpen,
			}))
		},
		steps: []step{
			{status: 200, want: d06("3", "2", "20", "*", "")},
			{status: 200, want: d06("3", "1", "40", "*", "")},
			{status: 200, want: d06("3", "0", "60", "*", "")},
			{status: 429, want: d06("3", "0", "20", "*", "20")},
		},
	},
	{
		name: "routes/one bucket per pattern, not per path",
		app: func(e *env) app {
			return app{global: &mw{lim: e.limiter(core.PerMinute(100)), routes: map[string]*core.Limiter{routeUser: e.limiter(core.PerMinute(2))}}}
		},
		steps: []step{
			{path: "/users/1", status: 200, want: d06("2", "1", "30", "2;w=60", "")},
			{path: "/users/2", status: 200, want: d06("2", "0", "60", "2;w=60", "")},
			{path: "/users/3", status: 429, want: d06("2", "0", "30", "2;w=60", "30")},
			{path: "/login", status: 200, want: d06("100", "99", "1", "100;w=60", "")},
		},
	},
	{
		name: "routes/a method in the pattern",
		app: func(e *env) app {
			return app{global: &mw{lim: e.limiter(core.PerMinute(100)), routes: map[string]*core.Limiter{
				"GET " + routeLogin: e.limiter(core.PerMinute(1)),
				"POST " + routeUser: e.limiter(core.PerMinute(2)),
			}}}
		},
		steps: []step{
			{path: "/login", status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/login", status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/users/1", status: 200, want: d06("100", "99", "1", "100;w=60", "")},
		},
	},
	{
		name: "routes/pattern in a sub-router or group",
		app: func(e *env) app {
			return app{global: &mw{lim: e.limiter(core.PerMinute(100)), routes: map[string]*core.Limiter{routeItem: e.limiter(core.PerMinute(1))}}}
		},
		steps: []step{
			{path: "/api/items/1", status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/api/items/2", status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/users/1", status: 200, want: d06("100", "99", "1", "100;w=60", "")},
		},
	},
	{
		name: "routes/unknown paths use the default limiter",
		app: func(e *env) app {
			return app{global: &mw{lim: e.limiter(core.PerMinute(2)), routes: map[string]*core.Limiter{routeUser: e.limiter(core.PerMinute(10))}}}
		},
		steps: []step{
			{path: "/nope/1", status: 404, notFound: true, want: d06("2", "1", "30", "2;w=60", "")},
			{path: "/users", status: 404, notFound: true, want: d06("2", "0", "60", "2;w=60", "")},
			{path: "/nope/3", status: 429, body: problem429("30 seconds"), want: d06("2", "0", "30", "2;w=60", "30")},
			{path: "/users/1", status: 200, want: d06("10", "9", "6", "10;w=60", "")},
		},
	},
	{
		name: "routes/a middleware on one route only",
		app: func(e *env) app {
			return app{route: map[string]*mw{
				routeLogin: {lim: e.limiter(core.PerMinute(1))},
				routeItem:  {lim: e.limiter(core.PerMinute(2))},
			}}
		},
		steps: []step{
			{path: "/login", status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/login", status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/users/1", status: 200, body: body, want: noFields},
			{path: "/api/items/1", status: 200, want: d06("2", "1", "30", "2;w=60", "")},
			{path: "/api/items/2", status: 200, want: d06("2", "0", "60", "2;w=60", "")},
			{path: "/api/items/3", status: 429, want: d06("2", "0", "30", "2;w=60", "30")},
		},
	},
	{
		name: "routes/global and route middlewares both count",
		app: func(e *env) app {
			return app{
				global: &mw{lim: e.limiter(core.PerMinute(3))},
				route:  map[string]*mw{routeLogin: {lim: e.config(core.Config{Store: core.NewMemoryStore(core.WithClock(e.clk.Now)), Limit: core.PerMinute(1), Name: "login", FailMode: core.FailClosed})}},
			}
		},
		steps: []step{
			{path: "/login", status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/login", status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/users/1", status: 200, want: d06("3", "0", "60", policy3, "")},
			{path: "/login", status: 429, want: d06("3", "0", "20", policy3, "20")},
		},
	},
	{
		name: "tiers/a limiter chosen per request",
		app: func(e *env) app {
			pro := e.limiter(core.PerMinute(10))
			return global(e.limiter(core.PerMinute(1)), nethttp.WithLimiterFunc(func(r *http.Request) *core.Limiter {
				if r.Header.Get("X-Plan") == "pro" {
					return pro
				}
				return nil
			}))
		},
		steps: []step{
			{status: 200, header: []string{"X-Plan", "pro"}, want: d06("10", "9", "6", "10;w=60", "")},
			{status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{status: 429, header: []string{"X-Plan", "free"}, want: d06("1", "0", "60", "1;w=60", "60")},
			{status: 200, header: []string{"X-Plan", "pro"}, want: d06("10", "8", "12", "10;w=60", "")},
		},
	},
	{
		name: "tiers/a route override comes first",
		app: func(e *env) app {
			pro := e.limiter(core.PerMinute(10))
			return app{global: &mw{
				lim:    e.limiter(core.PerMinute(5)),
				opts:   []nethttp.Option{nethttp.WithLimiterFunc(func(*http.Request) *core.Limiter { return pro })},
				routes: map[string]*core.Limiter{routeLogin: e.limiter(core.PerMinute(1))},
			}}
		},
		steps: []step{
			{path: "/login", status: 200, want: d06("1", "0", "60", "1;w=60", "")},
			{path: "/login", status: 429, want: d06("1", "0", "60", "1;w=60", "60")},
			{path: "/users/1", status: 200, want: d06("10", "9", "6", "10;w=60", "")},
		},
	},
}
