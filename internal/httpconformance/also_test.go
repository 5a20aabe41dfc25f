package httpconformance_test

import (
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// shared returns a limiter named name of lim on e's one memory store, as
// the limiters of a middleware with WithAlso must be.
func (e *env) shared(name string, lim core.Limit) *core.Limiter {
	if e.mem == nil {
		e.mem = core.NewMemoryStore(core.WithClock(e.clk.Now))
	}
	return e.config(core.Config{Store: e.mem, Name: name, Limit: lim, FailMode: core.FailOpen})
}

// perTenant is a global middleware of client (its own check, keyed by
// the client address) with tenant as WithAlso, keyed by X-Tenant.
func perTenant(client, tenant *core.Limiter, opts ...nethttp.Option) app {
	return global(client, append(opts, nethttp.WithAlso(tenant, keyfuncs.Header("X-Tenant")))...)
}

func tenantHeader(v string) []string { return []string{"X-Tenant", v} }

// d11 wants draft-11's fields, and Retry-After when retry is not "".
func d11(policy, rateLimit, retry string) map[string]string {
	return with(noFields, "RateLimit-Policy", policy, "RateLimit", rateLimit, "Retry-After", retry)
}

const (
	alsoPolicy11     = `"client";q=3;w=60, "tenant";q=2;w=60`
	problem400Tenant = `{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing rate-limit key: header X-Tenant is required"}`
)

// The WithAlso cases (issue 41): a client's limit (3 a minute) and its
// tenant's (2 a minute) decided in one call, all or nothing. Draft-11's
// RateLimit field shows every check's bucket, so the steps see what a
// refusal took from each: nothing.
var alsoCases = []tcase{
	{
		name: "also/allowed by both, then refused by the tenant: the client is not charged",
		app: func(e *env) app {
			return perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(2)), nethttp.WithHeaders(nethttp.HeadersDraft11))
		},
		steps: []step{
			{status: 200, body: body, header: tenantHeader("acme"), want: d11(alsoPolicy11, `"client";r=2;t=20, "tenant";r=1;t=30`, "")},
			{status: 200, body: body, header: tenantHeader("acme"), want: d11(alsoPolicy11, `"client";r=1;t=40, "tenant";r=0;t=60`, "")},
			{status: 429, body: problem429("30 seconds"), header: tenantHeader("acme"), want: merge(d11(alsoPolicy11, `"client";r=1;t=40, "tenant";r=0;t=30`, "30"), problemCT)},
			{status: 200, body: body, header: tenantHeader("other"), want: d11(alsoPolicy11, `"client";r=0;t=60, "tenant";r=1;t=30`, "")},
		},
	},
	{
		name: "also/refused by the own check: the tenant is not charged",
		app: func(e *env) app {
			return perTenant(e.shared("client", core.PerMinute(1)), e.shared("tenant", core.PerMinute(2)), nethttp.WithHeaders(nethttp.HeadersDraft11))
		},
		steps: []step{
			{status: 200, body: body, header: tenantHeader("acme"), want: d11(`"client";q=1;w=60, "tenant";q=2;w=60`, `"client";r=0;t=60, "tenant";r=1;t=30`, "")},
			{status: 429, body: problem429("60 seconds"), header: tenantHeader("acme"), want: d11(`"client";q=1;w=60, "tenant";q=2;w=60`, `"client";r=0;t=60, "tenant";r=1;t=30`, "60")},
			{status: 200, body: body, remote: "192.0.2.2:1234", header: tenantHeader("acme"), want: d11(`"client";q=1;w=60, "tenant";q=2;w=60`, `"client";r=0;t=60, "tenant";r=0;t=60`, "")},
		},
	},
	{
		name: "also/a key error of the tenant's key is 400, nothing charged",
		app: func(e *env) app {
			return perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(2)), nethttp.WithHeaders(nethttp.HeadersDraft11))
		},
		steps: []step{
			{status: 400, body: problem400Tenant, want: merge(noFields, problemCT)},
			{status: 200, body: body, header: tenantHeader("acme"), want: d11(alsoPolicy11, `"client";r=2;t=20, "tenant";r=1;t=30`, "")},
		},
	},
	{
		name: "also/draft06: the binding result's fields, every policy listed",
		app: func(e *env) app {
			return perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(2)))
		},
		steps: []step{
			{status: 200, body: body, header: tenantHeader("acme"), want: d06("2", "1", "30", "3;w=60, 2;w=60", "")},
			{status: 200, body: body, header: tenantHeader("acme"), want: d06("2", "0", "60", "3;w=60, 2;w=60", "")},
			{status: 429, body: problem429("30 seconds"), header: tenantHeader("acme"), want: d06("2", "0", "30", "3;w=60, 2;w=60", "30")},
			{status: 200, body: body, header: tenantHeader("other"), want: d06("3", "0", "60", "3;w=60, 2;w=60", "")},
		},
	},
	{
		name: "also/legacy describes the binding result only",
		app: func(e *env) app {
			return perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(1)), nethttp.WithHeaders(nethttp.HeadersLegacy))
		},
		steps: []step{
			{status: 200, header: tenantHeader("acme"), want: with(noFields, "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unixIn(60))},
			{status: 429, header: tenantHeader("acme"), want: with(noFields, "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unixIn(60), "Retry-After", "60")},
		},
	},
	{
		name: "also/none: Retry-After of the binding refusal only",
		app: func(e *env) app {
			return perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(1)), nethttp.WithHeaders(nethttp.HeadersNone))
		},
		steps: []step{
			{status: 200, body: body, header: tenantHeader("acme"), want: noFields},
			{status: 429, body: problem429("60 seconds"), header: tenantHeader("acme"), want: with(noFields, "Retry-After", "60")},
		},
	},
	{
		name: "also/a route's own limiter with the tenant's",
		app: func(e *env) app {
			a := perTenant(e.shared("client", perMinute3), e.shared("tenant", core.PerMinute(2)))
			a.global.routes = map[string]*core.Limiter{"GET " + routeLogin: e.shared("login", core.PerMinute(1))}
			return a
		},
		steps: []step{
			{path: routeLogin, status: 200, body: body, header: tenantHeader("acme"), want: d06("1", "0", "60", "1;w=60, 2;w=60", "")},
			{path: routeLogin, status: 429, body: problem429("60 seconds"), header: tenantHeader("acme"), want: d06("1", "0", "60", "1;w=60, 2;w=60", "60")},
			{status: 200, body: body, header: tenantHeader("acme"), want: d06("2", "0", "60", "3;w=60, 2;w=60", "")},
		},
	},
	{
		name: "also/a middleware on one route with a global ceiling",
		app: func(e *env) app {
			ceiling := e.shared("ceiling", core.PerMinute(2))
			return app{route: map[string]*mw{routeLogin: {lim: e.shared("client", perMinute3), opts: []nethttp.Option{
				nethttp.WithAlso(ceiling, func(*http.Request) (string, error) { return "*", nil }),
			}}}}
		},
		steps: []step{
			{path: routeLogin, status: 200, body: body, want: d06("2", "1", "30", "3;w=60, 2;w=60", "")},
			{path: routeLogin, status: 200, body: body, remote: "192.0.2.2:1234", want: d06("2", "0", "60", "3;w=60, 2;w=60", "")},
			{path: routeLogin, status: 429, body: problem429("30 seconds"), remote: "192.0.2.3:1234", want: d06("2", "0", "30", "3;w=60, 2;w=60", "30")},
			{status: 200, body: body, want: noFields},
		},
	},
}

func init() { cases = append(cases, alsoCases...) }
