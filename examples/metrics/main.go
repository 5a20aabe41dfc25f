// Command metrics serves a rate-limited API next to its Prometheus metrics:
//
//	go run ./examples/metrics                               # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/metrics     # a real Redis
//
//	curl -s -o /dev/null -w '%{http_code} ' 'localhost:8084/api/hello?[1-8]'; echo
//	curl -s -o /dev/null -w '%{http_code} ' 'localhost:8084/search?[1-8]'; echo
//	curl -s localhost:8084/export
//	curl -s localhost:8084/metrics | grep '^ratelimit_'
//
// /api/hello is limited to 5 requests a second per client address; /search
// runs a tighter limit in dry-run mode, which refuses nothing and counts what
// it would have refused as outcome="dry_run"; /export lets 2 requests per
// client address run at once (ratelimit_inflight_held and the lease
// series). /metrics is not rate limited.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
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
	app, err := newApp(core.Config{Store: core.NewRedisStore(client)})
	if err != nil {
		log.Fatal(err)
	}

	log.Printf("listening on %s; metrics at /metrics", *addr)
	srv := &http.Server{Addr: *addr, Handler: app, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
