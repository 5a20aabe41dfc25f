package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sluicehq/ratelimit/bench"
)

func redisThroughput(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	scs := []scenario{
		{name: "10k keys", keys: bench.Keys(10_000), limit: roomy, prefix: "tp10k:"},
		{name: "hot key", keys: bench.Keys(1), limit: roomy, prefix: "tphot:"},
		{name: "hot key, denied", keys: bench.Keys(1), limit: tight, prefix: "tpdeny:", drain: true},
		{name: "10k keys, 1 goroutine", keys: bench.Keys(10_000), limit: roomy, prefix: "tp1:", conc: 1},
	}
	// The README's client first, then the plain one, then the peers.
	plain := ratelimitPeer("ratelimit (plain redis.NewClient)", func(e *bench.Env) { e.PlainClient = true })
	peers := append([]bench.Peer{bench.RedisPeers[0], plain}, bench.RedisPeers[1:]...)
	res, err := matrix(ctx, c, r, peers, scs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### Through one Redis (%d goroutines unless said otherwise)\n", c.conc)
	fmt.Fprintf(out, "\nLimits: 1e9 per minute (all allowed), except _hot key, denied_: 100 per 10 s, burst 100 (≈all denied after the first 100). _1 goroutine_: one caller at a time, on 10k keys.\n")
	fmt.Fprintf(out, "Round trips are counted by a go-redis hook (a pipeline or MULTI/EXEC is one); Redis commands and CPU come from `INFO commandstats`/`INFO cpu` deltas and include the commands scripts run; script µs/call is the server's time per `EVALSHA`/`EVAL` (commandstats `usec`, the script's own commands included). _ratelimit_ is on the README's client (`ContextTimeoutEnabled`), _plain_ on a `redis.NewClient` without it; the plain row's ratio is its own to redis_rate. Allocations and client CPU are the whole process's (go-redis included) per decision. p99 is a bucket's upper end (≤ 12.5 %% above); ≥50ms counts decisions that took 50 ms or more exactly, over all rounds.\n")
	for _, sc := range scs {
		fmt.Fprintf(out, "\n#### %s\n\n", sc.name)
		fmt.Fprintln(out, "| library | decisions/s | ratelimit vs it | ns/op | allocs/op | round trips/decision | Redis cmds/decision | script µs/call | Redis CPU µs/decision | client CPU µs/decision | p99 | ≥50ms | allowed | errors |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		ours := res[sc.name][bench.RedisPeers[0].Name]
		for _, p := range peers {
			cl := res[sc.name][p.Name]
			vs := "—"
			switch p.Name {
			case bench.RedisPeers[0].Name:
			case plain.Name:
				vs = fmt.Sprintf("%.2f× redis_rate", ratio(cl, res[sc.name][bench.RedisPeers[1].Name]))
			default:
				vs = fmt.Sprintf("%.2f×", ratio(ours, cl))
			}
			dec, allowed, errs, first := totals(cl)
			lat := latency(cl)
			fmt.Fprintf(out, "| %s | %.0f | %s | %.0f | %.1f | %.2f | %s | %s | %.1f | %.1f | %v | %d | %.1f%% | %s |\n",
				p.Name, cl.median(bench.Measurement.PerSec), vs, cl.median(bench.Measurement.NsPerOp),
				cl.median(bench.Measurement.AllocsPerOp), cl.median(bench.Measurement.TripsPerOp),
				commands(cl), scriptTime(cl), cl.median(bench.Measurement.RedisCPUPerOp), cl.median(bench.Measurement.ClientCPUPerOp),
				lat.Quantile(0.99), slow(cl),
				100*float64(allowed)/float64(dec), errText(errs, dec, first))
		}
	}
	return nil
}

// scriptTime is the server's time per EVALSHA/EVAL call (the commands the
// script runs included), from commandstats, over all rounds.
func scriptTime(cl *cell) string {
	var calls, usec int64
	for _, m := range cl.ms {
		for _, k := range []string{"evalsha", "eval"} {
			calls += m.Server.Calls[k]
			usec += m.Server.Usec[k]
		}
	}
	if calls == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(usec)/float64(calls))
}

// latency merges the rounds' latencies.
func latency(cl *cell) *bench.Histogram {
	var h bench.Histogram
	for _, m := range cl.ms {
		for i := range h {
			h[i] += m.Latency[i]
		}
	}
	return &h
}

// slow is the decisions that took bench.SlowDecision or longer, over all
// rounds.
func slow(cl *cell) int64 {
	var n int64
	for _, m := range cl.ms {
		n += m.Slow
	}
	return n
}

func totals(cl *cell) (dec, allowed, errs int64, first error) {
	for _, m := range cl.ms {
		dec += m.Decisions
		allowed += m.Allowed
		errs += m.Errors
		if first == nil {
			first = m.FirstErr
		}
	}
	return
}

func errText(errs, dec int64, first error) string {
	if errs == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.2f%%: %s)", errs, 100*float64(errs)/float64(dec), shortErr(first))
}

// shortErr is an error's message cut to 60 bytes, fit for a table cell.
func shortErr(err error) string {
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return strings.ReplaceAll(msg, "|", "/")
}

// commands is the total per decision with its breakdown, over all rounds.
func commands(cl *cell) string {
	calls := map[string]int64{}
	var dec, total int64
	for _, m := range cl.ms {
		dec += m.Decisions
		for k, v := range m.Server.Calls {
			calls[k] += v
			total += v
		}
	}
	if dec == 0 {
		return "—"
	}
	names := make([]string, 0, len(calls))
	for k := range calls {
		if float64(calls[k])/float64(dec) >= 0.005 {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return calls[names[i]] > calls[names[j]] })
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.2f", strings.ToUpper(k), float64(calls[k])/float64(dec))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("**%.2f**", float64(total)/float64(dec))
	}
	return fmt.Sprintf("**%.2f** (%s)", float64(total)/float64(dec), strings.Join(parts, ", "))
}
