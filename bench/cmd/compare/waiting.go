package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The waiting section (DESIGN §8, "Waiting"): instances sharing one
// upstream that allows waitRate a second with a burst of waitBurst, as
// callers of it: ratelimit's nethttp.Transport (WaitN before each request)
// against redis_rate callers that sleep RetryAfter and try again. Each
// instance has its own Redis client; waitDemand goroutines in all call in
// closed loops, so demand always exceeds the rate.
const (
	waitRate   = 200
	waitBurst  = 20
	waitDemand = 64
)

// arrivals records when requests reach the upstream, and from which
// instance (the X-Instance header).
type arrivals struct {
	mu    sync.Mutex
	at    []time.Duration
	from  []int
	start time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := time.Since(a.start)
	i, _ := strconv.Atoi(r.Header.Get("X-Instance"))
	a.mu.Lock()
	a.at = append(a.at, t)
	a.from = append(a.from, i)
	a.mu.Unlock()
}

// tripCounter counts a client's round trips to Redis: commands and
// pipelines, each one trip.
type tripCounter struct{ n atomic.Int64 }

func (*tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// waitRun is one run's account.
type waitRun struct {
	admitted  int           // requests the upstream saw in the window
	worst     map[int]int   // Δ (ms) → most arrivals in any Δ
	sustained float64       // arrivals/s after the first second
	trips     int64         // Redis round trips
	perInst   []int         // arrivals per instance
	errors    int           // requests that failed otherwise than at the end
	took      time.Duration // the window
}

var waitDeltas = []int{10, 100, 1000}

// runWaiting drives n instances of peer ("ratelimit" or "redis_rate")
// against a fresh upstream for window.
func runWaiting(ctx context.Context, addr, peer, prefix string, n int, window time.Duration) (waitRun, error) {
	up := &arrivals{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	trips := &tripCounter{}
	per := max(1, waitDemand/n)
	type caller func(ctx context.Context) error
	callers := make([]caller, n)
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
		c.AddHook(trips)
		defer c.Close()
		send := func(ctx context.Context, hc *http.Client) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			req.Header.Set("X-Instance", strconv.Itoa(i))
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		base := &http.Transport{MaxIdleConnsPerHost: per + 1}
		switch peer {
		case "ratelimit":
			l, err := core.New(core.Config{
				Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: core.PerSecond(waitRate).WithBurst(waitBurst),
				Name: "upstream", FailMode: core.FailClosed, MaxWait: 5 * time.Second, Timeout: time.Second,
			})
			if err != nil {
				return waitRun{}, err
			}
			hc := &http.Client{Transport: nethttp.Transport(l, base)}
			callers[i] = func(ctx context.Context) error { return send(ctx, hc) }
		case "redis_rate":
			rl := redis_rate.NewLimiter(c)
			lim := redis_rate.Limit{Rate: waitRate, Burst: waitBurst, Period: time.Second}
			hc := &http.Client{Transport: base}
			callers[i] = func(ctx context.Context) error {
				for {
					res, err := rl.Allow(ctx, prefix+host, lim)
					if err != nil {
						return err
					}
					if res.Allowed > 0 {
						return send(ctx, hc)
					}
					t := time.NewTimer(res.RetryAfter)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					}
				}
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	var errs atomic.Int64
	var wg sync.WaitGroup
	up.start = time.Now()
	for i := range n {
		for range per {
			wg.Go(func() {
				for wctx.Err() == nil {
					err := callers[i](wctx)
					if errors.Is(err, core.ErrWaitTooLong) {
						return // its turn would come after the window: a caller's deadline
					}
					if err != nil && wctx.Err() == nil {
						errs.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	run := waitRun{trips: trips.n.Load(), perInst: make([]int, n), worst: map[int]int{}, errors: int(errs.Load()), took: window}
	up.mu.Lock()
	defer up.mu.Unlock()
	var at []time.Duration
	for j, t := range up.at {
		if t <= window {
			at = append(at, t)
			run.perInst[up.from[j]]++
		}
	}
	slices.Sort(at)
	run.admitted = len(at)
	for _, d := range waitDeltas {
		delta := time.Duration(d) * time.Millisecond
		hi := 0
		for lo := range at {
			for hi < len(at) && at[hi]-at[lo] < delta {
				hi++
			}
			run.worst[d] = max(run.worst[d], hi-lo)
		}
	}
	late := 0
	for _, t := range at {
		if t >= time.Second {
			late++
		}
	}
	run.sustained = float64(late) / (window - time.Second).Seconds()
	return run, nil
}

// fairness is the least and the most an instance got, over what an equal
// share of its goroutines would be.
func fairness(perInst []int, total int) (lo, hi float64) {
	n := len(perInst)
	lo, hi = 1e9, 0
	for _, c := range perInst {
		share := float64(c) * float64(n) / float64(max(1, total))
		lo, hi = min(lo, share), max(hi, share)
	}
	return lo, hi
}

func waiting(ctx context.Context, out io.Writer, c config) error {
	window := 3 * time.Second
	if c.quick {
		window = 2 * time.Second
	}
	fmt.Fprintf(out, "\n### Waiting: instances sharing one upstream\n\n")
	fmt.Fprintf(out, "An upstream (an in-process HTTP server) allowed %d calls a second with a burst of %d; %d goroutines in all, split over the instances, call it in closed loops for %v (demand always exceeds the rate). Each instance has its own Redis client. ratelimit: `nethttp.Transport` (WaitN before each request; MaxWait 5s). redis_rate: `Allow`, and on a refusal sleep `RetryAfter` and try again. _most in Δ_ is the most arrivals the upstream saw in any interval of Δ, against the bound C + R·Δ; _sustained_ counts arrivals after the first second; _fairness_ is the least and most an instance got over an equal share.\n\n",
		waitRate, waitBurst, waitDemand, window)
	fmt.Fprintln(out, "| instances | library | admitted | most in 10ms (≤ 22) | most in 100ms (≤ 40) | most in 1s (≤ 220) | sustained /s (≥ 190) | Redis round trips per admitted call | fairness | errors |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range []int{1, 4, 16, 64} {
		for _, peer := range []string{"ratelimit", "redis_rate"} {
			log.Printf("waiting: %d instances, %s", n, peer)
			r, err := runWaiting(ctx, c.addr, peer, fmt.Sprintf("wait:%s:%d:", peer, n), n, window)
			if err != nil {
				return fmt.Errorf("waiting, %s, %d instances: %w", peer, n, err)
			}
			lo, hi := fairness(r.perInst, r.admitted)
			fmt.Fprintf(out, "| %d | %s | %d | %d | %d | %d | %.0f | %.2f | %.2f–%.2f | %d |\n", n, peer, r.admitted,
				r.worst[10], r.worst[100], r.worst[1000], r.sustained, float64(r.trips)/float64(max(1, r.admitted)), lo, hi, r.errors)
		}
	}
	return waitTraces(ctx, out, c)
}
