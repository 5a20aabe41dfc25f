package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tally counts, per second of the run and per instance, the requests
// received and those each kind of limit let through.
type tally struct {
	start time.Time
	rows  int

	mu       sync.Mutex
	received []int
	shared   [][]int // [second][instance]
	local    [][]int
	last     time.Time // latest record
}

func newTally(start time.Time, d time.Duration, instances int) *tally {
	rows := int((d + time.Second - 1) / time.Second)
	t := &tally{start: start, rows: rows, received: make([]int, rows), shared: make([][]int, rows), local: make([][]int, rows), last: start}
	for i := range rows {
		t.shared[i] = make([]int, instances)
		t.local[i] = make([]int, instances)
	}
	return t
}

func (t *tally) record(now time.Time, inst int, sharedOK, localOK bool) {
	sec := min(max(int(now.Sub(t.start)/time.Second), 0), t.rows-1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.received[sec]++
	if sharedOK {
		t.shared[sec][inst]++
	}
	if localOK {
		t.local[sec][inst]++
	}
	if now.After(t.last) {
		t.last = now
	}
}

// progress is what the client has seen so far.
type progress struct {
	sent, allowed, refused, other atomic.Int64
}

// line returns the progress at elapsed, and the counts alone.
func (p *progress) line(elapsed time.Duration) (line, counts string) {
	counts = fmt.Sprintf("%4d sent  %4d allowed  %4d refused (429)", p.sent.Load(), p.allowed.Load(), p.refused.Load())
	return fmt.Sprintf("  %4.1fs  %s", elapsed.Seconds(), counts), counts
}

// burst sends o.rate requests a second for o.duration through the balancer
// as one client, each on its own goroutine at its scheduled instant, and
// returns the tally.
func (d *demo) burst(ctx context.Context, out io.Writer) (*report, error) {
	o := d.o
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	interval := time.Second / time.Duration(o.rate)
	total := int(o.duration / interval)
	fmt.Fprintf(out, "One client (%s: %s) sends %d requests/s for %v through the balancer: %d requests.\n",
		apiKeyHeader, clientKey, o.rate, o.duration, total)

	d.obs.reset()
	var p progress
	stopProgress := d.showProgress(out, &p)
	start := time.Now()
	t := newTally(start, o.duration, o.instances)
	d.tally.Store(t)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	var err error
send:
	for i := range total {
		timer.Reset(time.Until(start.Add(time.Duration(i) * interval)))
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break send
		case <-timer.C:
		}
		p.sent.Add(1)
		wg.Go(func() {
			status, err := get(ctx, client, d.balancer)
			switch {
			case err != nil:
				p.other.Add(1)
			case status == http.StatusOK:
				p.allowed.Add(1)
			case status == http.StatusTooManyRequests:
				p.refused.Add(1)
			default:
				p.other.Add(1)
			}
		})
	}
	wg.Wait()
	d.tally.Store(nil)
	stopProgress(time.Since(start))
	if err != nil {
		return nil, err
	}
	if n := p.other.Load(); n > 0 {
		fmt.Fprintf(out, "  warning: %d requests failed or got neither 200 nor 429\n", n)
	}
	return d.newReport(t, &p), nil
}

func get(ctx context.Context, c *http.Client, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(apiKeyHeader, clientKey)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// showProgress prints p as it moves: on a terminal one line rewritten in
// place with \r ten times a second, otherwise a plain line each second. The
// returned function stops it and prints the final line.
func (d *demo) showProgress(out io.Writer, p *progress) func(time.Duration) {
	start := time.Now()
	every := time.Second
	if d.o.tty {
		every = 100 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	width, last := 0, ""
	print := func(elapsed time.Duration) {
		s, counts := p.line(elapsed)
		if !d.o.tty {
			if counts != last {
				fmt.Fprintln(out, s)
			}
			last = counts
			return
		}
		pad := max(width-len(s), 0)
		width = len(s)
		fmt.Fprint(out, "\r"+s+strings.Repeat(" ", pad))
	}
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				print(time.Since(start))
			}
		}
	})
	return func(elapsed time.Duration) {
		close(done)
		wg.Wait()
		print(elapsed)
		if d.o.tty {
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out)
	}
}
