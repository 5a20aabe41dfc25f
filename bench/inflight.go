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

// TripsPerAdmitted is the round trips of an admitted request: Redis's
// script calls and releases, less one script call per refusal.
func (f InFlight) TripsPerAdmitted() float64 {
	return float64(f.Scripts-(f.Requests-f.Admitted)) / float64(f.Admitted)
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
	key := nethttp.WithKey(func(*http.Request) (string, error) { return "one", nil })
	var hs []http.Handler
	for range n {
		client := redis.NewClient(&redis.Options{Addr: r.Env.Addr, ContextTimeoutEnabled: true, PoolSize: perInstance})
		client.AddHook(r.Env.Trips)
		defer client.Close()
		c, err := core.NewConcurrency(core.ConcurrencyConfig{
			Store: core.NewRedisStore(client, core.WithPrefix(prefix)), Name: "inflight", Max: maxSlots,
			FailMode: core.FailClosed, Timeout: r.Env.Timeout, Lease: max(core.DefaultLease, 3*r.Env.Timeout),
		})
		if err != nil {
			return InFlight{}, err
		}
		hs = append(hs, nethttp.Concurrency(c, key)(handler))
	}
	serve := func(h http.Handler) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		return w.Code
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		for range perInstance {
			wg.Go(func() { serve(h) }) // dial, load the script
		}
	}
	wg.Wait()
	f.Peak = 0
	before, err := ReadServerStats(ctx, r.Admin)
	if err != nil {
		return InFlight{}, err
	}
	trips := r.Env.Trips.Load()
	deadline := time.Now().Add(window)
	var requests, admitted, errs atomic.Int64
	for _, h := range hs {
		for range perInstance {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					switch serve(h) {
					case http.StatusOK:
						admitted.Add(1)
					case http.StatusTooManyRequests:
					default:
						errs.Add(1)
					}
					requests.Add(1)
				}
			})
		}
	}
	wg.Wait()
	f.Trips = r.Env.Trips.Load() - trips
	after, err := ReadServerStats(ctx, r.Admin)
	if err != nil {
		return InFlight{}, err
	}
	d := after.Sub(before)
	f.Requests, f.Admitted, f.Errors = requests.Load(), admitted.Load(), errs.Load()
	f.Scripts = d.Calls["evalsha"] + d.Calls["eval"] + d.Calls["zrem"]
	f.Commands = d.Total()
	return f, nil
}
