// Command memcost (go build ./cmd/memcost) makes n serial memory
// decisions, for counting their instructions and cache misses under
// callgrind, which do not move with the machine's load:
//
//	for n in 100000 300000; do
//	  GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --cache-sim=yes \
//	    --callgrind-out-file=cg.$n ./memcost ratelimit hot $n
//	done
//
// then (total at 300000 − total at 100000) / 200000 per decision
// (BENCHMARKS.md, "Tricks kept").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/ratelimit/bench"
	"github.com/sluicehq/ratelimit/core"
)

var sink bool

func main() {
	flag.Parse()
	if flag.NArg() != 3 {
		fmt.Fprintln(os.Stderr, "usage: memcost ratelimit|go-limiter hot|10k N")
		os.Exit(2)
	}
	keys := bench.Keys(10_000)
	if flag.Arg(1) == "hot" {
		keys = bench.Keys(1)
	}
	var n int
	if _, err := fmt.Sscan(flag.Arg(2), &n); err != nil {
		fmt.Fprintln(os.Stderr, "memcost:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	var decide func(string) bool
	switch flag.Arg(0) {
	case "ratelimit":
		l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.Limit{Rate: 1e9, Period: time.Minute, Burst: 1e9}, FailMode: core.FailOpen})
		if err != nil {
			panic(err)
		}
		decide = func(k string) bool { r, _ := l.Allow(ctx, k); return r.Allowed }
	case "go-limiter":
		s, err := memorystore.New(&memorystore.Config{Tokens: 1e9, Interval: time.Minute})
		if err != nil {
			panic(err)
		}
		decide = func(k string) bool { _, _, _, ok, _ := s.Take(ctx, k); return ok }
	default:
		fmt.Fprintln(os.Stderr, "memcost: unknown peer", flag.Arg(0))
		os.Exit(2)
	}
	for _, k := range keys { // every bucket made before counting
		decide(k)
	}
	for i := range n {
		sink = decide(keys[i%len(keys)])
	}
}
