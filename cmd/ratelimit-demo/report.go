package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"
)

// report is the outcome of a burst, per second and in total.
type report struct {
	instances int
	limit     int // per second, and the burst
	sent      int
	seconds   []second
	elapsed   time.Duration // from the first request to the last decision
	shared    int           // let through by the shared limit
	local     int           // would have been let through by per-instance memory limits
	bound     int           // most the shared limit may let through in elapsed: burst + rate × elapsed
	// From the shared limiters' Observer.
	storeCalls, cached, degraded int64
}

// second is one row of the table.
type second struct {
	from, to time.Duration
	received int
	shared   []int // per instance
	local    []int
	bound    int // most the shared limit may have let through by the row's end, all rows so far
}

func (d *demo) newReport(t *tally, p *progress) *report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &report{
		instances:  d.o.instances,
		limit:      d.o.limit,
		sent:       int(p.sent.Load()),
		elapsed:    t.last.Sub(t.start),
		storeCalls: d.obs.storeCalls.Load(),
		cached:     d.obs.cached.Load(),
		degraded:   d.obs.degraded.Load(),
	}
	for i := range t.rows {
		s := second{
			from:     time.Duration(i) * time.Second,
			to:       min(time.Duration(i+1)*time.Second, d.o.duration),
			received: t.received[i],
			shared:   t.shared[i],
			local:    t.local[i],
		}
		end := s.to
		if i == t.rows-1 {
			end = max(end, r.elapsed)
		}
		s.bound = r.boundAt(end)
		r.seconds = append(r.seconds, s)
		r.shared += sum(s.shared)
		r.local += sum(s.local)
	}
	r.bound = r.boundAt(max(r.elapsed, d.o.duration))
	return r
}

// boundAt is the token bucket's guarantee: in any interval Δ, at most
// burst + rate × Δ requests get through.
func (r *report) boundAt(d time.Duration) int {
	return r.limit + int(math.Floor(float64(r.limit)*d.Seconds()))
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func (r *report) print(out io.Writer) {
	n := r.instances
	instCols := func(xs []int) string {
		var b strings.Builder
		for _, x := range xs {
			fmt.Fprintf(&b, " %6d", x)
		}
		return b.String()
	}
	var head strings.Builder
	for i := range n {
		fmt.Fprintf(&head, " inst-%d", i+1)
	}
	sharedW := 7*n + 18
	localW := 7*n + 7
	fmt.Fprintf(out, "%-8s %8s | %-*s | %-*s\n", "", "", sharedW, " ONE limit, shared in Redis", localW, " a limit per instance, in memory")
	fmt.Fprintf(out, "%-8s %8s | %s %6s %10s | %s %6s\n", "second", "requests", head.String(), "total", "so far/max", head.String(), "total")
	fmt.Fprintln(out, strings.Repeat("-", 18)+"+"+strings.Repeat("-", sharedW+1)+"+"+strings.Repeat("-", localW+1))
	cumulative := 0
	for _, s := range r.seconds {
		cumulative += sum(s.shared)
		fmt.Fprintf(out, "%-8s %8d | %s %6d %10s | %s %6d\n", span(s.from, s.to), s.received,
			instCols(s.shared), sum(s.shared), fmt.Sprintf("%d/%d", cumulative, s.bound), instCols(s.local), sum(s.local))
	}
	fmt.Fprintln(out, strings.Repeat("-", 18)+"+"+strings.Repeat("-", sharedW+1)+"+"+strings.Repeat("-", localW+1))
	totals := func(get func(second) []int) []int {
		t := make([]int, n)
		for _, s := range r.seconds {
			for i, x := range get(s) {
				t[i] += x
			}
		}
		return t
	}
	received := 0
	for _, s := range r.seconds {
		received += s.received
	}
	fmt.Fprintf(out, "%-8s %8d | %s %6d %10s | %s %6d\n\n", "total", received,
		instCols(totals(func(s second) []int { return s.shared })), r.shared, fmt.Sprintf("max %d", r.bound),
		instCols(totals(func(s second) []int { return s.local })), r.local)

	secs := r.elapsed.Seconds()
	fmt.Fprintf(out, "ONE limit in Redis:       %3d of %d let through. A limit of %d/s with a burst of %d allows at most\n", r.shared, r.sent, r.limit, r.limit)
	fmt.Fprintf(out, "                          %d + %d/s × %.1fs = %d, however the balancer spreads the requests.\n", r.limit, r.limit, secs, r.bound)
	ratio := 0.0
	if r.shared > 0 {
		ratio = float64(r.local) / float64(r.shared)
	}
	fmt.Fprintf(out, "A limit per instance:     %3d of %d let through: %.1f× as many. %d instances, each with its own\n", r.local, r.sent, ratio, r.instances)
	fmt.Fprintf(out, "                          bucket, enforce up to %d× the intended rate.\n", r.instances)
	fmt.Fprintf(out, "Redis round trips:        %3d; each instance's denial cache answered %d refusals without one.\n", r.storeCalls, r.cached)
	if r.degraded > 0 {
		fmt.Fprintf(out, "Degraded:                 %3d: Redis did not answer within the limiter's Timeout and FailOpen let\n", r.degraded)
		fmt.Fprintf(out, "                          the request through; not counted above. Is the machine very busy?\n")
	}
	fmt.Fprintln(out)
}

// span formats a row's interval: "0-1s", "3-3.5s".
func span(from, to time.Duration) string {
	f := func(d time.Duration) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") }
	return f(from) + "-" + f(to) + "s"
}

// showRefusal sends requests as the demo's client until one is refused, and
// prints that response as it came from the balancer.
func (d *demo) showRefusal(ctx context.Context, out io.Writer) error {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for range d.o.limit + 1 {
		req, err := http.NewRequestWithContext(ctx, "GET", d.balancer+"/", nil)
		if err != nil {
			return err
		}
		req.Header.Set(apiKeyHeader, clientKey)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			continue
		}
		dump, err := httputil.DumpResponse(resp, true)
		resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "The client's next request, refused (curl -i -H '%s: %s' %s/):\n\n", apiKeyHeader, clientKey, d.balancer)
		for _, line := range strings.Split(strings.TrimRight(string(bytes.ReplaceAll(dump, []byte("\r\n"), []byte("\n"))), "\n"), "\n") {
			if line != "" {
				line = "  " + line
			}
			fmt.Fprintln(out, line)
		}
		fmt.Fprintln(out)
		return nil
	}
	return fmt.Errorf("no request was refused in %d tries", d.o.limit+1)
}
