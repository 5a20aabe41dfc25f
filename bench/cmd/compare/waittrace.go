package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// waitTraces prints, for the waiting section's note: one outbound burst
// from 4 instances against PerSecond(10), an upstream 429 pausing every
// instance, a Charge putting a key in debt, and the script's commands per
// reservation and per cancel.
func waitTraces(ctx context.Context, out io.Writer, c config) error {
	limiters := func(prefix string, n int, lim core.Limit, maxWait time.Duration) ([]*core.Limiter, func(), error) {
		var ls []*core.Limiter
		var clients []*redis.Client
		for range n {
			cl := redis.NewClient(&redis.Options{Addr: c.addr, ContextTimeoutEnabled: true})
			clients = append(clients, cl)
			l, err := core.New(core.Config{Store: core.NewRedisStore(cl, core.WithPrefix(prefix)), Limit: lim, Name: "upstream",
				FailMode: core.FailClosed, MaxWait: maxWait, Timeout: time.Second})
			if err != nil {
				return nil, nil, err
			}
			ls = append(ls, l)
		}
		return ls, func() {
			for _, cl := range clients {
				cl.Close()
			}
		}, nil
	}
	call := func(hc *http.Client, url string, inst int) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Instance", strconv.Itoa(inst))
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// One burst: 4 instances, 6 requests each at once.
	up := &arrivals{}
	srv := httptest.NewServer(up)
	ls, done, err := limiters("trace:burst:", 4, core.PerSecond(10), 10*time.Second)
	if err != nil {
		return err
	}
	up.start = time.Now()
	var wg sync.WaitGroup
	for i, l := range ls {
		hc := &http.Client{Transport: nethttp.Transport(l, nil)}
		for range 6 {
			wg.Go(func() { _, _ = call(hc, srv.URL, i) })
		}
	}
	wg.Wait()
	srv.Close()
	done()
	fmt.Fprintf(out, "\n#### One outbound burst: 4 instances × 6 requests at once, PerSecond(10)\n\nArrivals at the upstream, ms after the burst began (instance in brackets):\n\n")
	fmt.Fprintln(out, "```")
	fmt.Fprintln(out, traceLine(up))
	fmt.Fprintln(out, "```")

	// An upstream 429 with Retry-After: 1 on the 8th request.
	up = &arrivals{}
	var seen atomic.Int64
	pause := time.Duration(0)
	var pauseMu sync.Mutex
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 8 {
			pauseMu.Lock()
			pause = time.Since(up.start)
			pauseMu.Unlock()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		up.ServeHTTP(w, r)
	}))
	ls, done, err = limiters("trace:pause:", 4, core.PerSecond(10).WithBurst(1), 5*time.Second)
	if err != nil {
		return err
	}
	up.start = time.Now()
	stop := time.Now().Add(2 * time.Second)
	for i, l := range ls {
		hc := &http.Client{Transport: nethttp.Transport(l, nil)}
		wg.Go(func() {
			for time.Now().Before(stop) {
				_, _ = call(hc, srv.URL, i)
			}
		})
	}
	wg.Wait()
	srv.Close()
	done()
	fmt.Fprintf(out, "\n#### An upstream 429 pauses every instance: 4 instances in closed loops, PerSecond(10) burst 1; the 8th request gets 429 with Retry-After: 1 at %v\n\n```\n%s\n```\n",
		pause.Round(time.Millisecond), traceLine(up))

	// A charge puts a key in debt.
	ls, done, err = limiters("trace:charge:", 1, core.PerSecond(10), 0)
	if err != nil {
		return err
	}
	res, _ := ls[0].Charge(ctx, "tenant", 25)
	a1, _ := ls[0].Allow(ctx, "tenant")
	a5, _ := ls[0].AllowN(ctx, "tenant", 5)
	done()
	fmt.Fprintf(out, "\n#### Charge: PerSecond(10), MaxWait 0 (the debt stops at one burst)\n\n")
	fmt.Fprintf(out, "- `Charge(25)` on a full bucket: Allowed %v, Remaining %d, RetryAfter %v (15 forgiven: the bucket owes 10)\n", res.Allowed, res.Remaining, res.RetryAfter.Round(time.Millisecond))
	fmt.Fprintf(out, "- then `Allow`: Allowed %v, RetryAfter %v; `AllowN(5)`: Allowed %v, RetryAfter %v\n",
		a1.Allowed, a1.RetryAfter.Round(time.Millisecond), a5.Allowed, a5.RetryAfter.Round(time.Millisecond))

	// Commands per reservation and per cancel.
	admin := redis.NewClient(&redis.Options{Addr: c.addr})
	defer admin.Close()
	ls, done, err = limiters("trace:cmds:", 1, core.PerSecond(1), time.Hour)
	if err != nil {
		return err
	}
	defer done()
	_, _ = ls[0].Allow(ctx, "warm") // loads the script
	const n = 100
	before := commandStats(ctx, admin)
	var rs []*core.Reservation
	for range n {
		r, err := ls[0].ReserveN(ctx, "k", 1)
		if err != nil || !r.OK() {
			return fmt.Errorf("trace: reservation: %v", err)
		}
		rs = append(rs, r)
	}
	mid := commandStats(ctx, admin)
	for i := len(rs) - 1; i >= 0; i-- {
		_ = rs[i].Cancel(ctx)
	}
	after := commandStats(ctx, admin)
	fmt.Fprintf(out, "\n#### Redis commands per reservation and per cancel (INFO commandstats, %d of each)\n\n", n)
	fmt.Fprintln(out, "| | EVALSHA | TIME | MGET | SETEX |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for _, row := range []struct {
		name string
		b, a map[string]int
	}{{"ReserveN", before, mid}, {"Cancel", mid, after}} {
		per := func(cmd string) string { return strconv.FormatFloat(float64(row.a[cmd]-row.b[cmd])/n, 'f', 2, 64) }
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", row.name, per("evalsha"), per("time"), per("mget"), per("setex"))
	}
	return nil
}

// traceLine formats up's arrivals in order: "ms[instance]".
func traceLine(up *arrivals) string {
	up.mu.Lock()
	defer up.mu.Unlock()
	parts := make([]string, len(up.at))
	for i, t := range up.at {
		parts[i] = fmt.Sprintf("%d[%d]", t.Milliseconds(), up.from[i])
	}
	return strings.Join(parts, " ")
}

// commandStats returns INFO commandstats' calls per command.
func commandStats(ctx context.Context, c *redis.Client) map[string]int {
	m := map[string]int{}
	info, _ := c.Info(ctx, "commandstats").Result()
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		m[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return m
}
