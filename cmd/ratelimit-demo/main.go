// Command ratelimit-demo shows what ratelimit is for: several instances of
// an app behind a load balancer enforcing ONE rate limit, because the
// buckets live in Redis and every decision is one atomic script there.
//
//	go run ./cmd/ratelimit-demo            # or: make demo
//	go run ./cmd/ratelimit-demo -serve     # then keep the instances up for curl
//
// It starts three net/http app instances on loopback ports, each with the
// ratelimit/nethttp middleware and its own *core.Limiter and Redis client,
// behind an in-process round-robin balancer (a reverse proxy). Redis is an
// embedded miniredis unless -redis (or REDIS_ADDR) names a real one.
//
// One client (one API key) then sends 50 requests a second for 4 seconds
// through the balancer, against a limit of 10 a second. A table shows, per
// second, how many each instance let through and how the total stays within
// the limit; and, side by side, how many per-instance in-memory limiters
// (core.NewMemoryStore) fed the same requests would have let through: three
// instances, three times the intended rate. Last comes one refused request as
// the client sees it: 429, RateLimit-* fields, Retry-After and the problem
// body.
//
// Output is plain lines when stdout is not a terminal, and a live progress
// line when it is. The run takes about 5 seconds and exits 0.
//
// Flags:
//
//	-redis ADDR      use the Redis at ADDR instead of an embedded one (default $REDIS_ADDR if it answers)
//	-serve           after the run, keep serving and print curl commands, until Ctrl-C
//	-addr ADDR       the balancer's listen address (default 127.0.0.1:0, a free port)
//	-instances N     app instances (default 3)
//	-limit N         requests per second per client, also the burst (default 10)
//	-rate N          requests per second the client sends (default 50)
//	-duration D      how long it sends (default 4s; 0 skips the run, with -serve)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	var o options
	flag.StringVar(&o.redisAddr, "redis", "", "use the Redis at `ADDR` instead of an embedded one (default $REDIS_ADDR if it answers)")
	flag.BoolVar(&o.serve, "serve", false, "after the run, keep the instances up for curl until Ctrl-C")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:0", "the balancer's listen `address`")
	flag.IntVar(&o.instances, "instances", 3, "app instances behind the balancer")
	flag.IntVar(&o.limit, "limit", 10, "requests per second per client, also the burst")
	flag.IntVar(&o.rate, "rate", 50, "requests per second the client sends")
	flag.DurationVar(&o.duration, "duration", 4*time.Second, "how long the client sends (0: no run; with -serve)")
	flag.Parse()
	if o.redisAddr == "" {
		o.envRedisAddr = os.Getenv("REDIS_ADDR")
	}
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		o.tty = true
	}

	// go-redis logs dial failures itself; the demo says what matters, and
	// the limiters log degraded decisions through slog.
	redis.SetLogger(quiet{})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "ratelimit-demo:", err)
		stop()
		os.Exit(1)
	}
}

// quiet is a go-redis logger that discards.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
