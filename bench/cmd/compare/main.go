// Command compare runs the side-by-side benchmarks of this library against
// other Go rate limiters in one invocation, interleaved (peers in ABAB order
// over several rounds, medians reported), and prints Markdown tables with
// absolute figures and ratios relative to this library.
//
// By default it starts its own redis-server on a free loopback port, so that
// INFO commandstats counts only its own traffic; -redis uses another server
// (whose counters then include whatever else talks to it).
//
//	go run ./cmd/compare          # full run, about 4 minutes
//	go run ./cmd/compare -quick   # about 40 seconds
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/bench"
)

type config struct {
	addr       string
	quick      bool
	rounds     int
	dur        time.Duration
	warm       time.Duration
	conc       int
	oaRounds   int
	oaWindow   time.Duration
	oaPer      int
	sections   string
	timeout    time.Duration
	apConc     []int
	oaInstance []int
}

func main() {
	var c config
	flag.StringVar(&c.addr, "redis", "", "Redis address to use instead of starting a redis-server of our own")
	flag.BoolVar(&c.quick, "quick", false, "short run: one round, shorter measurements (about 40s)")
	flag.IntVar(&c.rounds, "rounds", 0, "throughput rounds, peers alternating order; medians reported (default 7, quick 1)")
	flag.DurationVar(&c.dur, "d", 0, "measured time per throughput cell (default 500ms, quick 300ms)")
	flag.IntVar(&c.conc, "c", 32, "concurrent goroutines in throughput runs")
	flag.IntVar(&c.oaRounds, "oa-rounds", 0, "over-admission rounds; the worst is reported (default 2, quick 1)")
	flag.DurationVar(&c.oaWindow, "oa-window", 0, "over-admission window (default 1.5s, quick 500ms)")
	flag.IntVar(&c.oaPer, "oa-goroutines", 4, "goroutines per instance in the over-admission runs")
	flag.DurationVar(&c.timeout, "timeout", time.Second, "ratelimit's Config.Timeout in throughput runs (0: its 50ms default); over-admission runs keep the default")
	flag.StringVar(&c.sections, "only", "redis,memory,admission,autopipeline", "sections to run, comma-separated")
	flag.Parse()
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if c.quick {
				*v = quick
			}
		}
	}
	defd := func(v *time.Duration, full, quick time.Duration) {
		if *v == 0 {
			*v = full
			if c.quick {
				*v = quick
			}
		}
	}
	def(&c.rounds, 7, 1)
	def(&c.oaRounds, 2, 1)
	defd(&c.dur, 500*time.Millisecond, 300*time.Millisecond)
	defd(&c.oaWindow, 1500*time.Millisecond, 500*time.Millisecond)
	c.warm = c.dur / 5
	c.apConc = []int{1, 16, 64}
	c.oaInstance = []int{1, 4, 16, 64}

	log.SetFlags(0)
	log.SetPrefix("compare: ")
	if err := run(context.Background(), c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if c.addr == "" {
		srv, err := bench.StartRedis()
		if err != nil {
			return err
		}
		defer srv.Stop()
		c.addr = srv.Addr
	}
	r := bench.NewRunner(c.addr)
	defer r.Close()
	mem := bench.NewRunner("")
	defer mem.Close()

	started := time.Now()
	header(ctx, out, c, r.Admin)
	want := func(s string) bool { return slices.Contains(strings.Split(c.sections, ","), s) }
	r.Env.Timeout = c.timeout
	if want("redis") {
		if err := redisThroughput(ctx, out, c, r); err != nil {
			return err
		}
	}
	if want("memory") {
		if err := memoryThroughput(ctx, out, c, mem); err != nil {
			return err
		}
	}
	if want("admission") {
		if err := overAdmission(ctx, out, c, r); err != nil {
			return err
		}
	}
	if want("autopipeline") {
		r.Env.Timeout = c.timeout
		if err := autoPipeline(ctx, out, c, r); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n_Run took %s._\n", time.Since(started).Round(time.Second))
	return nil
}

func header(ctx context.Context, out io.Writer, c config, admin *redis.Client) {
	model := "unknown"
	if b, err := exec.Command("lscpu").Output(); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Model name" {
				model = strings.TrimSpace(v)
			}
		}
	}
	ver := "?"
	if info, err := admin.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				ver = v
			}
		}
	}
	fmt.Fprintf(out, "## Comparison run, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(out, "%d CPUs (%s), GOMAXPROCS %d, %s %s/%s, Redis %s at %s (shares the CPUs).\n",
		runtime.NumCPU(), model, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, ver, c.addr)
	if bi, ok := debug.ReadBuildInfo(); ok {
		var mods []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3",
				"github.com/throttled/throttled/v2", "github.com/go-chi/httprate", "github.com/go-chi/httprate-redis",
				"github.com/sethvargo/go-limiter", "golang.org/x/time":
				mods = append(mods, "`"+d.Path+"@"+d.Version+"`")
			}
		}
		fmt.Fprintf(out, "Peers: %s.\n", strings.Join(mods, ", "))
	}
	fmt.Fprintf(out, "Throughput: %d goroutines, %d round(s) of %v per cell, peers in alternating order, medians; ratelimit with Timeout %v. ",
		c.conc, c.rounds, c.dur, c.timeout)
	fmt.Fprintf(out, "Over-admission: %v window, %d goroutines per instance, worst of %d round(s).\n", c.oaWindow, c.oaPer, c.oaRounds)
}

// scenario is a key set and a limit.
type scenario struct {
	name   string
	keys   []string
	limit  bench.Limit
	prefix string
	drain  bool // exhaust the bucket before measuring: a run of denials
}

// roomy is high enough that throughput runs are (almost) all allowed.
var roomy = bench.Limit{Rate: 1_000_000_000, Period: time.Minute, Burst: 1_000_000_000}

// tight is the over-admission limit: 100 per 10 s, burst 100.
var tight = bench.Limit{Rate: 100, Period: 10 * time.Second, Burst: 100}

// cell is one scenario × peer over the rounds.
type cell struct {
	ms []bench.Measurement
}

func (c *cell) median(f func(bench.Measurement) float64) float64 {
	v := make([]float64, len(c.ms))
	for i, m := range c.ms {
		v[i] = f(m)
	}
	return median(v)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measure builds a fresh instance, warms it up (dial, script load, keys
// created), and measures it.
func measure(ctx context.Context, r *bench.Runner, p bench.Peer, sc scenario, conc int, warm, dur time.Duration) (bench.Measurement, error) {
	inst, err := p.New(r.Env, sc.limit, sc.prefix+sanitize(p.Name)+":")
	if err != nil {
		return bench.Measurement{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	defer inst.Close()
	if sc.drain {
		w := inst.NewWorker()
		for i := 0; i < 10*sc.limit.Burst; i++ {
			if ok, _ := w(ctx, sc.keys[0]); !ok {
				break
			}
		}
	}
	if _, err := r.Throughput(ctx, inst, sc.keys, conc, warm); err != nil {
		return bench.Measurement{}, err
	}
	m, err := r.Throughput(ctx, inst, sc.keys, conc, dur)
	if err != nil {
		return bench.Measurement{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	return m, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '/' || r == '+' || r == '{' || r == '}' {
			return '-'
		}
		return r
	}, s)
}

// matrix runs every scenario × peer for c.rounds rounds, reversing the peer
// order every other round (ABAB… then …BABA) so that drift in the machine's
// load falls on every peer alike.
func matrix(ctx context.Context, c config, r *bench.Runner, peers []bench.Peer, scs []scenario) (map[string]map[string]*cell, error) {
	res := map[string]map[string]*cell{}
	for _, sc := range scs {
		res[sc.name] = map[string]*cell{}
		for _, p := range peers {
			res[sc.name][p.Name] = &cell{}
		}
	}
	for round := range c.rounds {
		order := slices.Clone(peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, sc := range scs {
			for _, p := range order {
				m, err := measure(ctx, r, p, sc, c.conc, c.warm, c.dur)
				if err != nil {
					return nil, err
				}
				res[sc.name][p.Name].ms = append(res[sc.name][p.Name].ms, m)
				log.Printf("round %d %-10s %-24s %10.0f/s", round+1, sc.name, p.Name, m.PerSec())
			}
		}
	}
	return res, nil
}

// ratio is the median over rounds of ours/theirs decisions per second,
// each pair measured in the same round.
func ratio(ours, theirs *cell) float64 {
	v := make([]float64, 0, len(ours.ms))
	for i := range min(len(ours.ms), len(theirs.ms)) {
		v = append(v, ours.ms[i].PerSec()/theirs.ms[i].PerSec())
	}
	return median(v)
}

func redisThroughput(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	scs := []scenario{
		{name: "10k keys", keys: bench.Keys(10_000), limit: roomy, prefix: "tp10k:"},
		{name: "hot key", keys: bench.Keys(1), limit: roomy, prefix: "tphot:"},
		{name: "hot key, denied", keys: bench.Keys(1), limit: tight, prefix: "tpdeny:", drain: true},
	}
	res, err := matrix(ctx, c, r, bench.RedisPeers, scs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### Through one Redis (%d goroutines)\n", c.conc)
	fmt.Fprintf(out, "\nLimits: 1e9 per minute (all allowed), except _hot key, denied_: 100 per 10 s, burst 100 (≈all denied after the first 100).\n")
	fmt.Fprintf(out, "Round trips are counted by a go-redis hook (a pipeline or MULTI/EXEC is one); Redis commands and CPU come from `INFO commandstats`/`INFO cpu` deltas and include the commands scripts run; script µs/call is the server's time per `EVALSHA`/`EVAL` (commandstats `usec`, the script's own commands included). Allocations and client CPU are the whole process's (go-redis included) per decision. p99 is an upper bound (power-of-two buckets); ≥50ms counts decisions that took 32.8 ms or more (bucket), over all rounds.\n")
	for _, sc := range scs {
		fmt.Fprintf(out, "\n#### %s\n\n", sc.name)
		fmt.Fprintln(out, "| library | decisions/s | ratelimit vs it | ns/op | allocs/op | round trips/decision | Redis cmds/decision | script µs/call | Redis CPU µs/decision | client CPU µs/decision | p99 | ≥50ms | allowed | errors |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
		ours := res[sc.name][bench.RedisPeers[0].Name]
		for _, p := range bench.RedisPeers {
			cl := res[sc.name][p.Name]
			vs := "—"
			if p.Name != bench.RedisPeers[0].Name {
				vs = fmt.Sprintf("%.2f×", ratio(ours, cl))
			}
			dec, allowed, errs, first := totals(cl)
			lat := latency(cl)
			fmt.Fprintf(out, "| %s | %.0f | %s | %.0f | %.1f | %.2f | %s | %s | %.1f | %.1f | %v | %d | %.1f%% | %s |\n",
				p.Name, cl.median(bench.Measurement.PerSec), vs, cl.median(bench.Measurement.NsPerOp),
				cl.median(bench.Measurement.AllocsPerOp), cl.median(bench.Measurement.TripsPerOp),
				commands(cl), scriptTime(cl), cl.median(bench.Measurement.RedisCPUPerOp), cl.median(bench.Measurement.ClientCPUPerOp),
				lat.Quantile(0.99), lat.Over(50*time.Millisecond),
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
	msg := first.Error()
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return fmt.Sprintf("%d (%.2f%%: %s)", errs, 100*float64(errs)/float64(dec), strings.ReplaceAll(msg, "|", "/"))
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

func overAdmission(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	type key struct {
		peer string
		n    int
	}
	worst := map[key]bench.Admission{}
	errs := map[key]int64{}
	// ratelimit once more as configured by default: its 50ms Timeout and
	// breaker, on a starved machine, turn stalls into FailMode decisions.
	peers := append(slices.Clone(bench.RedisPeers), bench.Peer{
		Name: "ratelimit, default Timeout 50ms", Redis: true,
		New: func(env *bench.Env, lim bench.Limit, prefix string) (*bench.Instance, error) {
			e := *env
			e.Timeout = 0
			return bench.RedisPeers[0].New(&e, lim, prefix)
		},
	})
	for round := range c.oaRounds {
		order := slices.Clone(peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range c.oaInstance {
			for _, p := range order {
				prefix := fmt.Sprintf("oa:%d:%d:%d:%s:", time.Now().UnixNano(), round, n, sanitize(p.Name))
				a, err := r.OverAdmission(ctx, p, tight, n, c.oaPer, c.oaWindow, prefix)
				if err != nil {
					return fmt.Errorf("%s × %d: %w", p.Name, n, err)
				}
				log.Printf("over-admission round %d %-16s ×%-2d admitted %d bound %d errors %d", round+1, p.Name, n, a.Admitted, a.Bound, a.Errors)
				k := key{p.Name, n}
				errs[k] += a.Errors
				if w, ok := worst[k]; !ok || a.Over() > w.Over() || (a.Over() == w.Over() && a.Errors > w.Errors) {
					worst[k] = a
				}
			}
		}
	}
	fmt.Fprintf(out, "\n### Over-admission: instances hammering one key\n\n")
	fmt.Fprintf(out, "Limit 100 per 10 s, burst 100; each instance its own client and limiter, %d goroutines each, for %v; ratelimit with FailClosed and Timeout %v unless said otherwise. ", c.oaPer, c.oaWindow, c.timeout)
	fmt.Fprintf(out, "Cell: admitted / exact bound C + R·Δ (Δ from the first request sent to the last answer), then requests over the bound, errors (an error admits nothing), decisions asked and Redis round trips they took. Worst of %d round(s).\n\n", c.oaRounds)
	fmt.Fprint(out, "| library |")
	for _, n := range c.oaInstance {
		fmt.Fprintf(out, " %d instance(s) |", n)
	}
	fmt.Fprint(out, "\n|---|")
	for range c.oaInstance {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out)
	var notes []string
	for _, p := range peers {
		fmt.Fprintf(out, "| %s |", p.Name)
		for _, n := range c.oaInstance {
			a := worst[key{p.Name, n}]
			fmt.Fprintf(out, " %d / %d, over **%d**; errors %d; %d decisions, %d round trips |", a.Admitted, a.Bound, a.Over(), a.Errors, a.Decisions, a.Trips)
			if a.FirstErr != nil && len(notes) < 12 {
				notes = append(notes, fmt.Sprintf("%s × %d: %v", p.Name, n, a.FirstErr))
			}
		}
		fmt.Fprintln(out)
	}
	if len(notes) > 0 {
		fmt.Fprintf(out, "\nFirst errors seen:\n\n")
		for _, n := range notes {
			fmt.Fprintf(out, "- %s\n", n)
		}
	}
	return nil
}

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
