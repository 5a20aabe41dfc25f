package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// InFlight is one run of the in-flight limit's over-admission test: n
// instances, each its own client, core.Concurrency and nethttp.Concurrency
// middleware, all on one key; their handlers count the requests inside
// them in one shared counter.
type InFlight struct {
	Instances int
	Max       int
	Peak      int64 // the most requests inside handlers at once, across instances
	Requests  int64 // requests served (admitted or refused)
	Admitted  int64
	Errors    int64 // answers other than 200 and 429: degraded (503)
	Trips     int64 // client round trips to Redis
	Scripts   int64 // script calls and release commands Redis ran (commandstats: evalsha, eval, zrem), none inside a script
	Commands  int64 // every command Redis ran, those inside scripts included
}

// Over is how many more requests than Max were inside handlers at once.
func (f InFlight) Over() int64 { return max(0, f.Peak-int64(f.Max)) }

// TripsPerRequest is client round trips per request (acquire + release
// for an admitted one, acquire alone for a refused one).
func (f InFlight) TripsPerRequest() float64 { return float64(f.Trips) / float64(f.Requests) }

// ScriptsPerRequest is Redis's script calls and releases per request:
// an acquire call may carry the acquires of many requests on one key.
func (f InFlight) ScriptsPerRequest() float64 {
	return float64(f.Scripts) / float64(max(1, f.Requests))
}

// InFlight runs n instances of an in-flight limit of max on one key, each
// with perInstance goroutines sending requests in a closed loop for
// window; an admitted request's handler holds its slot for hold.
func (r *Runner) InFlight(ctx context.Context, n, perInstance, maxSlots int, window, hold time.Duration, prefix string) (InFlight, error) {
	if r.Admin == nil {
		return InFlight{}, errors.New("bench: InFlight needs a standalone Redis")
	}
	f := InFlight{Instances: n, Max: maxSlots}
	var inside atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		now := inside.Add(1)
		for p := atomic.LoadInt64(&f.Peak); now > p && !atomic.CompareAndSwapInt64(&f.Peak, p, now); p = atomic.LoadInt64(&f.Peak) {
		}
		time.Sleep(hold)
		inside.Add(-1)
	})
	hs, closeAll, err := r.inFlightInstances(n, perInstance, maxSlots, prefix, handler)
	defer closeAll()
	if err != nil {
		return InFlight{}, err
	}
	closedLoop(ctx, hs, perInstance, 0) // one request per goroutine: dial, load the script
	f.Peak = 0
	before, err := ReadServerStats(ctx, r.Admin)
	if err != nil {
		return InFlight{}, err
	}
	trips := r.Env.Trips.Load()
	f.Requests, f.Admitted, f.Errors = closedLoop(ctx, hs, perInstance, window)
	f.Trips = r.Env.Trips.Load() - trips
	after, err := ReadServerStats(ctx, r.Admin)
	if err != nil {
		return InFlight{}, err
	}
	d := after.Sub(before)
	f.Scripts = d.Calls["evalsha"] + d.Calls["eval"] + d.Calls["zrem"]
	f.Commands = d.Total()
	return f, nil
}

// closedLoop sends requests through hs, perInstance goroutines each, for
// window, and counts them: all, admitted (200) and errors (neither 200
// nor 429).
func closedLoop(ctx context.Context, hs []http.Handler, perInstance int, window time.Duration) (requests, admitted, errs int64) {
	var wg sync.WaitGroup
	deadline := time.Now().Add(window)
	for _, h := range hs {
		for range perInstance {
			wg.Go(func() {
				var n, ok, bad int64
				for {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
					switch n++; w.Code {
					case http.StatusOK:
						ok++
					case http.StatusTooManyRequests:
					default:
						bad++
					}
					if !time.Now().Before(deadline) {
						break
					}
				}
				atomic.AddInt64(&requests, n)
				atomic.AddInt64(&admitted, ok)
				atomic.AddInt64(&errs, bad)
			})
		}
	}
	wg.Wait()
	return requests, admitted, errs
}

// inFlightInstances returns n instances of handler behind an in-flight
// limit of maxSlots on one key, each with its own client, and a function
// closing the clients.
func (r *Runner) inFlightInstances(n, perInstance, maxSlots int, prefix string, handler http.Handler) ([]http.Handler, func(), error) {
	key := nethttp.WithKey(func(*http.Request) (string, error) { return "one", nil })
	var hs []http.Handler
	var clients []*redis.Client
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for range n {
		client := redis.NewClient(&redis.Options{Addr: r.Env.Addr, ContextTimeoutEnabled: true, PoolSize: perInstance})
		client.AddHook(r.Env.Trips)
		clients = append(clients, client)
		c, err := core.NewConcurrency(core.ConcurrencyConfig{
			Store: core.NewRedisStore(client, core.WithPrefix(prefix)), Name: "inflight", Max: maxSlots,
			FailMode: core.FailClosed, Timeout: r.Env.Timeout, Lease: max(15*time.Second, 3*r.Env.Timeout),
		})
		if err != nil {
			return nil, closeAll, err
		}
		hs = append(hs, nethttp.Concurrency(c, key)(handler))
	}
	return hs, closeAll, nil
}
