package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/bench"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The across section (DESIGN §8, "Decisions across keys"): three limits
// on every request (the client's, its tenant's, a global ceiling "*")
// decided by one middleware with two WithAlso (one core.AllowAll), against
// the same three limits as three chained middlewares (three AllowN), and
// one middleware with the client's limit alone (one AllowN) as the
// reference. Keys: "user-NNNNN" clients, tenants of 100 clients each.

// acrossShape is how the three limits are put on a request.
type acrossShape int

const (
	acrossOne     acrossShape = iota // the client's limit alone
	acrossAlso                       // one middleware, two WithAlso
	acrossChained                    // three middlewares
)

// acrossPeers are the three shapes, as peers of the matrix.
var acrossPeers = []bench.Peer{
	{Name: "one middleware, 1 limit", Redis: true, New: acrossPeer(acrossOne)},
	{Name: "WithAlso, 3 limits", Redis: true, New: acrossPeer(acrossAlso)},
	{Name: "3 chained middlewares", Redis: true, New: acrossPeer(acrossChained)},
}

// acrossApp is the three limiters of a shape and the handler limiting
// with them.
type acrossApp struct {
	client, tenant, global *core.Limiter
	h                      http.Handler
	rdb                    *redis.Client
}

// Keys of a request, from the fields the worker sets, read without
// hashing (every shape reads them alike).
func clientKey(r *http.Request) (string, error) { return r.Header["X-Client"][0], nil }
func tenantKey(r *http.Request) (string, error) { return r.Header["X-Tenant"][0], nil }
func globalKey(*http.Request) (string, error)   { return "*", nil }

// newAcrossApp builds shape on a client of env (round trips counted),
// each limiter with limits[i] (client, tenant, global), FailClosed.
func newAcrossApp(env *bench.Env, shape acrossShape, limits [3]bench.Limit, prefix string) (*acrossApp, error) {
	rdb := redis.NewClient(&redis.Options{Addr: env.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(env.Trips)
	store := core.NewRedisStore(rdb, core.WithPrefix(prefix))
	a := &acrossApp{rdb: rdb}
	for i, l := range []**core.Limiter{&a.client, &a.tenant, &a.global} {
		var err error
		*l, err = core.New(core.Config{
			Store:    store,
			Name:     []string{"client", "tenant", "global"}[i],
			Limit:    core.Limit{Rate: limits[i].Rate, Period: limits[i].Period, Burst: limits[i].Burst},
			FailMode: core.FailClosed,
			Timeout:  env.Timeout,
			Logger:   slog.New(slog.DiscardHandler),
		})
		if err != nil {
			rdb.Close()
			return nil, err
		}
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	switch shape {
	case acrossOne:
		a.h = nethttp.Middleware(a.client, nethttp.WithKey(clientKey))(ok)
	case acrossAlso:
		a.h = nethttp.Middleware(a.client, nethttp.WithKey(clientKey),
			nethttp.WithAlso(a.tenant, tenantKey), nethttp.WithAlso(a.global, globalKey))(ok)
	case acrossChained:
		a.h = nethttp.Middleware(a.client, nethttp.WithKey(clientKey))(
			nethttp.Middleware(a.tenant, nethttp.WithKey(tenantKey))(
				nethttp.Middleware(a.global, nethttp.WithKey(globalKey))(ok)))
	}
	return a, nil
}

// statusWriter keeps the status of a response and discards the rest.
type statusWriter struct {
	h    http.Header
	code int
}

func (w *statusWriter) Header() http.Header { return w.h }
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}
func (w *statusWriter) WriteHeader(code int) { w.code = code }

// serve sends a request of client key (tenant: key less its last two
// digits) through a.h with w and r, owned by one goroutine; it reports
// whether the request reached the handler.
func (a *acrossApp) serve(w *statusWriter, r *http.Request, vals *[2]string, key string) (bool, error) {
	vals[0], vals[1] = key, key[:len(key)-2]
	r.Header["X-Client"], r.Header["X-Tenant"] = vals[0:1:1], vals[1:2:2]
	clear(w.h)
	w.code = 0
	a.h.ServeHTTP(w, r)
	switch w.code {
	case 0, http.StatusOK:
		return true, nil
	case http.StatusServiceUnavailable:
		return false, errors.New("degraded: the store did not decide")
	}
	return false, nil
}

func acrossPeer(shape acrossShape) func(env *bench.Env, lim bench.Limit, prefix string) (*bench.Instance, error) {
	return func(env *bench.Env, lim bench.Limit, prefix string) (*bench.Instance, error) {
		a, err := newAcrossApp(env, shape, [3]bench.Limit{lim, lim, lim}, prefix)
		if err != nil {
			return nil, err
		}
		return &bench.Instance{
			NewWorker: func() bench.Worker {
				w := &statusWriter{h: make(http.Header, 8)}
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				vals := new([2]string)
				return func(_ context.Context, key string) (bool, error) { return a.serve(w, r, vals, key) }
			},
			Close: func() { a.rdb.Close() },
		}, nil
	}
}

// acrossRefused sends n requests of distinct clients of one tenant while
// the global ceiling is spent, and returns the tokens they took from the
// client and tenant buckets (none, were every refusal all or nothing).
func acrossRefused(ctx context.Context, env *bench.Env, shape acrossShape, n int, prefix string) (taken, refused int, err error) {
	const burst = 1_000
	some := bench.Limit{Rate: 1, Period: time.Hour, Burst: burst}
	a, err := newAcrossApp(env, shape, [3]bench.Limit{some, some, {Rate: 1, Period: time.Hour, Burst: 1}}, prefix)
	if err != nil {
		return 0, 0, err
	}
	defer a.rdb.Close()
	if _, err := a.global.Allow(ctx, "*"); err != nil { // the ceiling's one token
		return 0, 0, err
	}
	w := &statusWriter{h: make(http.Header, 8)}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	keys := bench.Keys(n)
	for _, k := range keys {
		if _, err := a.serve(w, r, new([2]string), k); err != nil {
			return 0, 0, err
		}
		if w.code == http.StatusTooManyRequests {
			refused++
		}
	}
	left := func(l *core.Limiter, key string) (int, error) {
		res, err := l.Peek(ctx, key, 1)
		if res.Degraded {
			err = errors.New("degraded peek")
		}
		return res.Remaining, err
	}
	for _, k := range keys {
		c, err := left(a.client, k)
		if err != nil {
			return 0, 0, err
		}
		taken += burst - c
	}
	t, err := left(a.tenant, keys[0][:len(keys[0])-2])
	return taken + burst - t, refused, err
}

func acrossKeys(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	scs := []scenario{
		{name: "10k clients", keys: bench.Keys(10_000), limit: roomy, prefix: "across:"},
		{name: "10k clients, 1 goroutine", keys: bench.Keys(10_000), limit: roomy, prefix: "across1:", conc: 1},
	}
	res, err := matrix(ctx, c, r, acrossPeers, scs)
	if err != nil {
		return err
	}
	const n = 100
	var taken [3]int
	for i := 1; i < len(acrossPeers); i++ {
		t, refused, err := acrossRefused(ctx, r.Env, acrossShape(i), n, fmt.Sprintf("across-refused:%d:", i))
		if err != nil {
			return err
		}
		if refused != n {
			return fmt.Errorf("across: %s: %d of %d refused, want all", acrossPeers[i].Name, refused, n)
		}
		taken[i] = t
	}
	fmt.Fprintf(out, "\n### Decisions across keys (%d goroutines unless said otherwise)\n", c.conc)
	fmt.Fprintf(out, "\nEvery request is limited by the client's limit, its tenant's (100 clients a tenant) and a global ceiling (key \"*\"), each 1e9 per minute (all allowed), through nethttp middleware on one Redis client: one middleware with two `WithAlso` (one `core.AllowAll`), or three chained middlewares (three `AllowN`); the reference is one middleware with the client's limit alone. _refused by the last_: %d requests of new clients of one tenant while the ceiling is spent (1 per hour, its token taken), and the tokens they took from the client and tenant buckets. Round trips per request (a pipeline is one); Redis CPU from `INFO cpu`, client CPU this process's (getrusage), per request.\n", n)
	fmt.Fprintln(out, "\n| shape | requests/s | vs one | 1 goroutine/s | vs one | round trips 32 · 1 | Redis CPU µs 32 · 1 | client CPU µs 32 · 1 | allocs 32 | refused by the last: tokens taken |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	one := acrossPeers[0].Name
	for i, p := range acrossPeers {
		many, lone := res[scs[0].name][p.Name], res[scs[1].name][p.Name]
		refusal := fmt.Sprint(taken[i])
		if i == 0 {
			refusal = "—"
		}
		fmt.Fprintf(out, "| %s | %.0f | %.2f× | %.0f | %.2f× | %.2f · %.2f | %.1f · %.1f | %.1f · %.1f | %.1f | %s |\n", p.Name,
			many.median(bench.Measurement.PerSec), ratio(many, res[scs[0].name][one]),
			lone.median(bench.Measurement.PerSec), ratio(lone, res[scs[1].name][one]),
			many.median(bench.Measurement.TripsPerOp), lone.median(bench.Measurement.TripsPerOp),
			many.median(bench.Measurement.RedisCPUPerOp), lone.median(bench.Measurement.RedisCPUPerOp),
			many.median(bench.Measurement.ClientCPUPerOp), lone.median(bench.Measurement.ClientCPUPerOp),
			many.median(bench.Measurement.AllocsPerOp), refusal)
	}
	for _, sc := range scs {
		for _, p := range acrossPeers {
			if dec, _, errs, first := totals(res[sc.name][p.Name]); errs > 0 {
				fmt.Fprintf(out, "\n%s, %s: %s\n", sc.name, p.Name, errText(errs, dec, first))
			}
		}
	}
	return nil
}
