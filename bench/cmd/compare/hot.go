package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicehq/ratelimit/bench"
)

// The hot section is DESIGN §8's "Hot allowed key (Borrow)" row: one key,
// c.conc goroutines, every decision allowed, through the run's Redis and
// through a 3-primary Redis Cluster of its own, ratelimit without Borrow
// (every decision the store's, batched) and with c.borrow, the memory
// store beside them as the aim. The hot-admission section is the
// over-admission matrix of the same two at 1–64 instances.

// hotPeers are ratelimit without Borrow and with c.borrow, Timeout
// c.timeout (0: the default), FailClosed.
func hotPeers(c config) []bench.Peer {
	return []bench.Peer{
		ratelimitPeer("ratelimit, Borrow 0", func(e *bench.Env) { e.Timeout, e.Borrow = c.timeout, 0 }),
		ratelimitPeer("ratelimit, Borrow "+c.borrow.String(), func(e *bench.Env) { e.Timeout, e.Borrow = c.timeout, c.borrow }),
	}
}

func hotKey(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	scs := []scenario{{name: "hot allowed key", keys: bench.Keys(1), limit: roomy, prefix: "hk:"}}
	peers := append(hotPeers(c), bench.MemoryPeers[0])
	one, err := matrix(ctx, c, r, peers, scs)
	if err != nil {
		return err
	}
	cl, err := bench.StartCluster(3)
	if err != nil {
		return err
	}
	defer cl.Stop()
	cr := bench.NewClusterRunner(cl.Addrs())
	defer cr.Close()
	clu, err := matrix(ctx, c, cr, hotPeers(c), scs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### Hot allowed key, Borrow %v\n\n", c.borrow)
	fmt.Fprintf(out, "One key, %d goroutines, limit 1e9 per minute (all allowed); ratelimit on the README's client, FailClosed, Timeout %s, a degraded decision counted as an error; through the run's own redis-server and through a 3-primary Cluster it starts (Redis figures summed over the nodes). %d round(s) of %v per cell, alternating order, medians; _× Borrow 0_ is the median of per-round ratios. _From slices_: decisions allowed from a borrowed slice (`DecisionEvent.Borrowed`). Redis calls: `EVALSHA`, `EVAL` and `FCALL` (`INFO commandstats`) over decisions, all rounds; Redis CPU: `used_cpu_user + used_cpu_sys` over decisions; allocations and client CPU the whole process's.\n\n",
		c.conc, timeoutText(c.timeout), c.rounds, c.dur)
	fmt.Fprintln(out, "| Redis | library | decisions/s | × Borrow 0 | from slices | Redis calls/decision | round trips/decision | Redis CPU µs/decision | client CPU µs/decision | allocs/decision | p99 | errors |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range []struct {
		where string
		res   map[string]map[string]*cell
		peers []bench.Peer
	}{{"one", one, peers}, {"Cluster, 3 primaries", clu, hotPeers(c)}} {
		res := t.res[scs[0].name]
		base := res[t.peers[0].Name]
		for _, p := range t.peers {
			cl := res[p.Name]
			vs := "—"
			if p.Name != t.peers[0].Name {
				vs = fmt.Sprintf("%.1f×", ratio(cl, base))
			}
			dec, _, errs, first := totals(cl)
			var borrowed int64
			for _, m := range cl.ms {
				borrowed += m.Borrowed
			}
			fmt.Fprintf(out, "| %s | %s | %.0f | %s | %.1f%% | %.3g | %.3g | %.3g | %.3g | %.2g | %v | %s |\n", t.where, p.Name,
				cl.median(bench.Measurement.PerSec), vs, 100*float64(borrowed)/float64(max(1, dec)), scriptCalls(cl), cl.median(bench.Measurement.TripsPerOp),
				cl.median(bench.Measurement.RedisCPUPerOp), cl.median(bench.Measurement.ClientCPUPerOp),
				cl.median(bench.Measurement.AllocsPerOp), latency(cl).Quantile(0.99), errText(errs, dec, first))
		}
	}
	return nil
}

// scriptCalls is the script and function calls Redis counted per decision,
// over all rounds.
func scriptCalls(cl *cell) float64 {
	var calls, dec int64
	for _, m := range cl.ms {
		dec += m.Decisions
		for _, k := range []string{"evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro"} {
			calls += m.Server.Calls[k]
		}
	}
	return float64(calls) / float64(max(1, dec))
}

// hotAdmission is the over-admission matrix of ratelimit without and with
// Borrow, one key, at c.hotInstance instances.
func hotAdmission(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	fmt.Fprintf(out, "\n### Over-admission with Borrow %v: instances on one key\n\n", c.borrow)
	return admissionMatrix(ctx, out, c, r, hotPeers(c), c.hotInstance, "hoa")
}
