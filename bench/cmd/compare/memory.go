package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/ratelimit/bench"
)

func memoryThroughput(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	scs := []scenario{
		{name: "10k keys", keys: bench.Keys(10_000), limit: roomy},
		{name: "hot key", keys: bench.Keys(1), limit: roomy},
	}
	res, err := matrix(ctx, c, r, bench.MemoryPeers, scs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### In memory (%d goroutines)\n", c.conc)
	fmt.Fprintf(out, "\nSame loop, no Redis. \"ratelimit vs it\" is the median of per-round ratios (each pair measured back to back), so it need not equal the ratio of the medians when the machine's load moves. CPU ns/decision is this process's CPU time (all goroutines, the loop included) per decision: steadier than wall time when other processes take the CPUs.\n")
	fmt.Fprintln(out, "\n| library | 10k keys: decisions/s | ratelimit vs it | ns/op | CPU ns/decision | allocs/op | hot key: decisions/s | ratelimit vs it | ns/op | CPU ns/decision | allocs/op |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range bench.MemoryPeers {
		fmt.Fprintf(out, "| %s ", p.Name)
		for _, sc := range scs {
			cl := res[sc.name][p.Name]
			vs := "—"
			if p.Name != bench.MemoryPeers[0].Name {
				vs = fmt.Sprintf("%.2f×", ratio(res[sc.name][bench.MemoryPeers[0].Name], cl))
			}
			fmt.Fprintf(out, "| %.0f | %s | %.1f | %.0f | %.2f ", cl.median(bench.Measurement.PerSec), vs,
				cl.median(bench.Measurement.NsPerOp), 1000*cl.median(bench.Measurement.ClientCPUPerOp), cl.median(bench.Measurement.AllocsPerOp))
		}
		fmt.Fprintln(out, "|")
	}
	return nil
}
