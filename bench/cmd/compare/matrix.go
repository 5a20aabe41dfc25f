package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/ratelimit/bench"
)

// scenario is a key set and a limit.
type scenario struct {
	name   string
	keys   []string
	limit  bench.Limit
	prefix string
	drain  bool // exhaust the bucket before measuring: a run of denials
	conc   int  // goroutines; 0: the -c flag
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
				conc := c.conc
				if sc.conc > 0 {
					conc = sc.conc
				}
				m, err := measure(ctx, r, p, sc, conc, c.warm, c.dur)
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
func ratio(ours, theirs *cell) float64 { return ratioBy(bench.Measurement.PerSec, ours, theirs) }

// ratioBy is ratio with another figure than decisions per second.
func ratioBy(f func(bench.Measurement) float64, ours, theirs *cell) float64 {
	v := make([]float64, 0, len(ours.ms))
	for i := range min(len(ours.ms), len(theirs.ms)) {
		v = append(v, f(ours.ms[i])/f(theirs.ms[i]))
	}
	return median(v)
}
