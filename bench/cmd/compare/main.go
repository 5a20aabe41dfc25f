// Command compare runs the side-by-side benchmarks of this library against
// other Go rate limiters in one invocation, interleaved (peers in ABAB order
// over several rounds, medians reported), and prints Markdown tables with
// absolute figures and ratios relative to this library.
//
// By default it starts its own redis-server on a free loopback port, so that
// INFO commandstats counts only its own traffic; -redis uses another server
// (whose counters then include whatever else talks to it).
//
//	go run ./cmd/compare                 # full run
//	go run ./cmd/compare -quick          # a shorter one
//	go run ./cmd/compare -only rtt,flood # some sections (see -only)
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
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/bench"
)

type config struct {
	addr        string
	quick       bool
	rounds      int
	dur         time.Duration
	warm        time.Duration
	conc        int
	oaRounds    int
	oaWindow    time.Duration
	oaPer       int
	oaPause     time.Duration
	sections    string
	timeout     time.Duration
	apConc      []int
	oaInstance  []int
	borrow      time.Duration
	hotInstance []int

	rttLatency   []time.Duration
	floodLatency time.Duration
	floodConc    int
	floodPause   time.Duration
	floodWindow  time.Duration
	floodWarm    time.Duration
	floodRounds  int
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
	flag.DurationVar(&c.oaPause, "oa-pause", 0, "pause between one goroutine's requests in the over-admission runs (0: closed loop)")
	flag.DurationVar(&c.timeout, "timeout", 0, "ratelimit's Config.Timeout in the throughput runs (0: its 50ms default, as DESIGN §8 asks); over-admission also runs a row with the default")
	flag.DurationVar(&c.borrow, "borrow", time.Second, "ratelimit's Config.Borrow in the hot and hot-admission sections' Borrow rows")
	flag.StringVar(&c.sections, "only", "redis,memory,admission,autopipeline,rtt,flood,cluster,waiting,across,hot,hot-admission",
		"sections to run, comma-separated: redis, memory, admission, autopipeline, rtt (through a latency proxy), flood (hot key at +30ms), cluster (a 3-primary Redis Cluster of its own), waiting (instances sharing an upstream), across (three limits per request: WithAlso vs chained middlewares), hot (an allowed hot key without and with -borrow, one Redis and a Cluster), hot-admission (over-admission at 1–64 instances without and with -borrow)")
	rtt := flag.String("rtt", "0ms,5ms,30ms", "latencies the rtt section's proxy adds to every reply, comma-separated")
	flag.DurationVar(&c.floodLatency, "flood-latency", 30*time.Millisecond, "latency the flood section's proxy adds to every reply")
	flag.IntVar(&c.floodConc, "flood-goroutines", 64, "goroutines flooding the hot key")
	flag.DurationVar(&c.floodPause, "flood-pause", 100*time.Microsecond, "pause between one flooding goroutine's requests")
	flag.DurationVar(&c.floodWindow, "flood-window", 0, "measured time per flood run (default 1.5s, quick 1s)")
	flag.IntVar(&c.floodRounds, "flood-rounds", 0, "flood rounds, every run reported (default 3, quick 1)")
	flag.Parse()
	for _, f := range strings.Split(*rtt, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			log.Fatalf("compare: -rtt %q: want durations like 0ms,5ms,30ms", *rtt)
		}
		c.rttLatency = append(c.rttLatency, d)
	}
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
	def(&c.floodRounds, 3, 1)
	defd(&c.floodWindow, 1500*time.Millisecond, time.Second)
	defd(&c.dur, 500*time.Millisecond, 300*time.Millisecond)
	defd(&c.oaWindow, 1500*time.Millisecond, 500*time.Millisecond)
	c.warm = c.dur / 5
	c.floodWarm = (c.floodWindow / 3).Round(time.Millisecond)
	c.apConc = []int{1, 16, 64}
	c.oaInstance = []int{1, 4, 16, 64}
	c.hotInstance = []int{1, 2, 4, 8, 16, 32, 64}

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
	if want("rtt") {
		if err := roundTrip(ctx, out, c); err != nil {
			return err
		}
	}
	if want("flood") {
		if err := hotKeyFlood(ctx, out, c); err != nil {
			return err
		}
	}
	if want("cluster") {
		if err := clusterThroughput(ctx, out, c); err != nil {
			return err
		}
	}
	if want("waiting") {
		if err := waiting(ctx, out, c); err != nil {
			return err
		}
	}
	if want("across") {
		r.Env.Timeout = c.timeout
		if err := acrossKeys(ctx, out, c, r); err != nil {
			return err
		}
	}
	if want("hot") {
		if err := hotKey(ctx, out, c, r); err != nil {
			return err
		}
	}
	if want("hot-admission") {
		if err := hotAdmission(ctx, out, c, r); err != nil {
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
	fmt.Fprintf(out, "Throughput: %d goroutines, %d round(s) of %v per cell, peers in alternating order, medians; ratelimit with Timeout %s (the RTT, flood and Cluster tables: the default). ",
		c.conc, c.rounds, c.dur, timeoutText(c.timeout))
	fmt.Fprintf(out, "Over-admission: %v window, %d goroutines per instance, worst of %d round(s).\n", c.oaWindow, c.oaPer, c.oaRounds)
}
