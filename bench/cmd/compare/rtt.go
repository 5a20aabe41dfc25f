package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"

	"github.com/sluicehq/ratelimit/bench"
)

// roundTrip runs ratelimit (default Timeout, both client settings) against
// redis_rate through a loopback delay line adding each of c.rttLatency to
// every reply, at c.conc goroutines and at one, on 10k keys.
func roundTrip(ctx context.Context, out io.Writer, c config) error {
	peers := defaultTimeoutPeers()
	scs := []scenario{
		{name: fmt.Sprintf("10k keys, %d goroutines", c.conc), keys: bench.Keys(10_000), limit: roomy, prefix: "rtt:"},
		{name: "10k keys, 1 goroutine", keys: bench.Keys(10_000), limit: roomy, prefix: "rtt1:", conc: 1},
	}
	res := make([]map[string]map[string]*cell, len(c.rttLatency))
	for i, lat := range c.rttLatency {
		log.Printf("rtt: replies delayed by %v", lat)
		proxy, err := bench.StartDelayProxy(c.addr, lat)
		if err != nil {
			return err
		}
		r := bench.NewRunner(c.addr) // INFO straight from the server
		r.Env.Addr = proxy.Addr()
		cc := c
		// Enough round trips per cell for a p99 even for one caller.
		cc.dur = max(c.dur, 40*lat)
		cc.warm = max(c.warm, 10*lat)
		scs := slices.Clone(scs)
		for j := range scs {
			scs[j].prefix = fmt.Sprintf("%s%v:", scs[j].prefix, lat)
		}
		res[i], err = matrix(ctx, cc, r, peers, scs)
		r.Close()
		proxy.Close()
		if err != nil {
			return fmt.Errorf("rtt +%v: %w", lat, err)
		}
	}
	lats := make([]string, len(c.rttLatency))
	for i, lat := range c.rttLatency {
		lats[i] = latencyText(lat)
	}
	fmt.Fprintf(out, "\n### Round trips: Redis %s away\n\n", strings.Join(lats, ", "))
	fmt.Fprintf(out, "Every peer talks to the server through a loopback delay line that adds the latency once to every reply chunk (pipelined replies are not delayed in turn; requests pass at once), in this process, the 0 ms row included. ratelimit with its default Timeout 50ms and FailClosed, on a client with `ContextTimeoutEnabled` (the README's) and on a plain `redis.NewClient`; a degraded decision counts as an error. Limit 1e9 per minute (all allowed), 10k keys. Measured %d round(s) per cell of at least %v, and 40 × the added latency; _not failed/s_ leaves out errors and degraded decisions (FailMode's answers are fast and say nothing of the store path), and the ratio to redis_rate is the median of per-round ratios of it. p99 is a bucket's upper end (≤ 12.5 %% above); ≥50ms counts decisions that took 50 ms or more exactly, over all rounds.\n", c.rounds, c.dur)
	for _, sc := range scs {
		fmt.Fprintf(out, "\n#### %s\n\n", sc.name)
		fmt.Fprintln(out, "| added latency | library | decisions/s | not failed/s | ratelimit vs redis_rate | p99 | ≥50ms | decisions | errors / degraded |")
		fmt.Fprintln(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		for i, lat := range c.rttLatency {
			for _, p := range peers {
				cl := res[i][sc.name][p.Name]
				dec, _, errs, first := totals(cl)
				fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %v | %d | %d | %s |\n", latencyText(lat), p.Name,
					cl.median(bench.Measurement.PerSec), cl.median(bench.Measurement.DecidedPerSec), vsRedisRate(p, res[i][sc.name]),
					latency(cl).Quantile(0.99), slow(cl), dec, errText(errs, dec, first))
			}
		}
	}
	return nil
}
