// Command concurrency limits an export endpoint to 100 requests a minute
// and at most 2 at once per API key, across every instance sharing the
// Redis: a third concurrent export gets 429 until one finishes, the 101st
// in a minute 429 until a token comes back, and neither refusal costs the
// other limit anything.
//
//	go run ./examples/concurrency                              # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/concurrency    # a real Redis
//	curl -i -H 'X-API-Key: k1' localhost:8089/export           # three at once: the third is 429
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

func main() {
	addr := flag.String("addr", ":8089", "address to listen on")
	took := flag.Duration("export", 5*time.Second, "how long an export takes")
	flag.Parse()
	client := redisClient()
	defer client.Close()
	app, err := newApp(core.NewRedisStore(client, core.WithPrefix("concurrency-example:")), 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(*took): // the export's work
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/csv")
		fmt.Fprintln(w, "id,total")
		fmt.Fprintln(w, "1,42")
	}))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, app))
}

// redisClient connects to REDIS_ADDR, or to an embedded miniredis when it
// is not set.
func redisClient() *redis.Client {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		addr = m.Addr()
		log.Printf("embedded Redis (miniredis) at %s; set REDIS_ADDR to use a real one", addr)
	}
	// The option the README recommends: a stalled Redis frees its
	// connections at each decision's deadline.
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}
