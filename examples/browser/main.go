// Command browser is a page on one origin calling a chi API on another,
// limited to 3 calls a minute per X-API-Key, with go-chi/cors in front of
// the limiter: open the page and it shows the six calls its script made
// as JavaScript sees them (200 200 200 429 429 429, Retry-After readable).
//
//	go run ./examples/browser                               # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/browser     # a real Redis
//	open http://127.0.0.1:8087/
package main

import (
	"flag"
	"log"
	"net/http"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

func main() {
	pageAddr := flag.String("page", "127.0.0.1:8087", "address the page is served on (its origin is http://<address>)")
	apiAddr := flag.String("api", "127.0.0.1:8088", "address the API listens on")
	flag.Parse()
	client := redisClient()
	defer client.Close()
	api, err := newAPI(core.Config{Store: core.NewRedisStore(client)}, "http://"+*pageAddr)
	if err != nil {
		log.Fatal(err)
	}
	page := newPage("http://"+*apiAddr, func(calls []call) {
		for i, c := range calls {
			log.Printf("the page's call %d: %s", i+1, c)
		}
	})
	go func() { log.Fatal(http.ListenAndServe(*apiAddr, api)) }()
	log.Printf("page on http://%s/, API on http://%s", *pageAddr, *apiAddr)
	log.Fatal(http.ListenAndServe(*pageAddr, page))
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
