package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/ratelimit/bench"
)

// clusterThroughput starts a 3-primary Redis Cluster of its own and runs
// ratelimit (default Timeout, both client settings) against redis_rate on
// cluster clients.
func clusterThroughput(ctx context.Context, out io.Writer, c config) error {
	cl, err := bench.StartCluster(3)
	if err != nil {
		return err
	}
	defer cl.Stop()
	r := bench.NewClusterRunner(cl.Addrs())
	defer r.Close()
	peers := defaultTimeoutPeers()
	scs := []scenario{
		{name: "10k keys, 32 goroutines", keys: bench.Keys(10_000), limit: roomy, prefix: "cl32:", conc: 32},
		{name: "10k keys, 128 goroutines", keys: bench.Keys(10_000), limit: roomy, prefix: "cl128:", conc: 128},
		{name: "hot key, 32 goroutines", keys: bench.Keys(1), limit: roomy, prefix: "clhot:", conc: 32},
		{name: "10k keys, 1 goroutine", keys: bench.Keys(10_000), limit: roomy, prefix: "cl1:", conc: 1},
	}
	res, err := matrix(ctx, c, r, peers, scs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### Redis Cluster: 3 primaries on this machine\n\n")
	fmt.Fprintf(out, "A cluster the run starts itself (`redis-server --cluster-enabled yes` × 3 on loopback, `redis-cli --cluster create … --cluster-replicas 0`), stopped at the end; every peer on a `redis.NewClusterClient` with default options (ratelimit's README client adds `ContextTimeoutEnabled`). ratelimit with its default Timeout 50ms and FailClosed; a degraded decision counts as an error. Limit 1e9 per minute (all allowed). %d round(s) of %v per cell, alternating order; _not failed/s_ leaves out errors and degraded decisions, and the ratio to redis_rate is the median of per-round ratios of it. Allocations and client CPU are the whole process's per decision; Round trips are counted on each node's client, Redis CPU and commands summed over the three nodes. p99 is a bucket's upper end (≤ 12.5 %% above); ≥50ms counts decisions of 50 ms or more, over all rounds.\n\n", c.rounds, c.dur)
	fmt.Fprintln(out, "| scenario | library | decisions/s | not failed/s | ratelimit vs redis_rate | allocs/decision | round trips/decision | Redis cmds/decision | Redis CPU µs/decision | client CPU µs/decision | p99 | ≥50ms | errors / degraded |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, sc := range scs {
		for _, p := range peers {
			cl := res[sc.name][p.Name]
			dec, _, errs, first := totals(cl)
			fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %.1f | %.2f | %s | %.1f | %.1f | %v | %d | %s |\n", sc.name, p.Name,
				cl.median(bench.Measurement.PerSec), cl.median(bench.Measurement.DecidedPerSec), vsRedisRate(p, res[sc.name]),
				cl.median(bench.Measurement.AllocsPerOp), cl.median(bench.Measurement.TripsPerOp), commands(cl),
				cl.median(bench.Measurement.RedisCPUPerOp), cl.median(bench.Measurement.ClientCPUPerOp),
				latency(cl).Quantile(0.99), slow(cl), errText(errs, dec, first))
		}
	}
	return nil
}
