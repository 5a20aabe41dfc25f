// Command echov5 is a small echo v5 app limited by ratelimit: 60 requests a
// minute per client address by default, 5 for POST /login (refused with
// 503 while Redis is down), 1000 for /api/items.
//
//	go run ./examples/echov5                               # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/echov5     # a real Redis
//	curl -i localhost:8085/api/items/1
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
	addr := flag.String("addr", ":8085", "address to listen on")
	flag.Parse()
	client := redisClient()
	defer client.Close()
	app, err := newApp(core.Config{Store: core.NewRedisStore(client)})
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
