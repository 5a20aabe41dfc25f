// Command metrics serves a rate-limited API next to its Prometheus metrics:
//
//	go run ./examples/metrics                               # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/metrics     # a real Redis
//
//	curl -s -o /dev/null -w '%{http_code} ' 'localhost:8084/api/hello?[1-8]'; echo
//	curl -s -o /dev/null -w '%{http_code} ' 'localhost:8084/search?[1-8]'; echo
//	curl -s localhost:8084/metrics | grep '^ratelimit_'
//
// /api/hello is limited to 5 requests a second per client address; /search
// runs a tighter limit in dry-run mode, which refuses nothing and counts what
// it would have refused as outcome="dry_run". /metrics is not rate limited.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/metrics"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

func main() {
	addr := flag.String("addr", ":8084", "address to listen on")
	flag.Parse()

	redisAddr := os.Getenv("REDIS_ADDR")
	if redisAddr == "" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // expire idle buckets as a real Redis would
		if err := m.Start(); err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		redisAddr = m.Addr()
		log.Printf("embedded Redis (miniredis) at %s; set REDIS_ADDR to use a real one", redisAddr)
	}
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store := core.NewRedisStore(client)

	// One Collector observes every limiter; register it once.
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	api, err := core.New(core.Config{Store: store, Limit: core.PerSecond(5), Name: "api", FailMode: core.FailOpen, Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	search, err := core.New(core.Config{Store: store, Limit: core.PerSecond(2), Name: "search-trial", FailMode: core.FailOpen, Observer: m})
	if err != nil {
		log.Fatal(err)
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello\n")) })
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", ratelimit.Middleware(api, ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /search", ratelimit.Middleware(search, ratelimit.WithDryRun(), ratelimit.WithObserver(m.HTTPObserver()))(hello))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	log.Printf("listening on %s; metrics at /metrics", *addr)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
