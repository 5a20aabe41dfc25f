package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/bench"
)

// autoPipeline measures this library on a plain client against go-redis's
// auto-pipelining clients, at several concurrencies, 10k keys.
func autoPipeline(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	modes := []struct {
		name   string
		client func(*redis.Client) (redis.UniversalClient, error)
	}{
		{"plain *redis.Client", nil},
		{"Client.AutoPipeline() (defaults)", func(c *redis.Client) (redis.UniversalClient, error) { return c.AutoPipeline() }},
		{"AutoPipeline, FullDuplex", func(c *redis.Client) (redis.UniversalClient, error) {
			o := redis.DefaultBlockingAutoPipelineOptions()
			o.FullDuplex = true
			return c.AutoPipelineWithOptions(o)
		}},
	}
	peers := make([]bench.Peer, len(modes))
	for i, m := range modes {
		client := m.client
		peers[i] = bench.Peer{Name: m.name, Redis: true, New: func(env *bench.Env, lim bench.Limit, prefix string) (*bench.Instance, error) {
			e := *env
			e.Client = client
			return bench.RedisPeers[0].New(&e, lim, prefix)
		}}
	}
	sc := scenario{name: "10k keys", keys: bench.Keys(10_000), limit: roomy, prefix: "ap:"}
	res := map[int]map[string]*cell{}
	for _, conc := range c.apConc {
		cc := c
		cc.conc = conc
		m, err := matrix(ctx, cc, r, peers, []scenario{sc})
		if err != nil {
			return err
		}
		res[conc] = m[sc.name]
	}
	fmt.Fprintf(out, "\n### ratelimit with go-redis auto-pipelining (10k keys)\n\n")
	fmt.Fprintf(out, "go-redis %s: `Client.AutoPipeline()` is the blocking face (a command returns when executed; concurrent callers' commands are batched into pipelines); FullDuplex streams them on one held connection. The round-trip hook sees a half-duplex batch as one pipeline, but full-duplex commands one by one, so its 1.000 is not a count of network round trips.\n\n", redis.Version())
	fmt.Fprint(out, "| client |")
	for _, conc := range c.apConc {
		fmt.Fprintf(out, " c=%d decisions/s | vs plain | round trips/decision | Redis CPU µs/decision | allocs/op |", conc)
	}
	fmt.Fprint(out, "\n|---|")
	for range c.apConc {
		fmt.Fprint(out, "---:|---:|---:|---:|---:|")
	}
	fmt.Fprintln(out)
	for _, m := range modes {
		fmt.Fprintf(out, "| %s |", m.name)
		for _, conc := range c.apConc {
			cl := res[conc][m.name]
			vs := "—"
			if m.name != modes[0].name {
				vs = fmt.Sprintf("%.2f×", 1/ratio(res[conc][modes[0].name], cl))
			}
			_, _, errs, first := totals(cl)
			e := ""
			if errs > 0 {
				e = fmt.Sprintf(" (errors %d: %v)", errs, first)
			}
			fmt.Fprintf(out, " %.0f%s | %s | %.3f | %.1f | %.1f |", cl.median(bench.Measurement.PerSec), e, vs,
				cl.median(bench.Measurement.TripsPerOp), cl.median(bench.Measurement.RedisCPUPerOp), cl.median(bench.Measurement.AllocsPerOp))
		}
		fmt.Fprintln(out)
	}
	return nil
}
