// Command login protects a login endpoint against password guessing,
// counting failed attempts only: 20 failures a minute per client address,
// 5 an hour per username, both refused with 503 while Redis is down. A
// user who types the right password is never locked out by their own
// successful logins.
//
//	go run ./examples/login                              # embedded Redis (miniredis)
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/login    # a real Redis
//	curl -i -d '{"username":"alice","password":"wrong"}' localhost:8086/login
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

func main() {
	addr := flag.String("addr", ":8086", "address to listen on")
	flag.Parse()
	client := redisClient()
	defer client.Close()
	store := core.NewRedisStore(client, core.WithPrefix("login-example:"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.Preload(ctx); err != nil {
		log.Fatalf("Redis: %v", err)
	}
	app, err := newApp(store, 0) // the default Timeout, 50 ms
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, app))
}

// newApp serves POST /login with its two limits in store, each decision
// bounded by timeout (0: the default).
func newApp(store core.Store, timeout time.Duration) (http.Handler, error) {
	byIP, err := core.New(core.Config{
		Store: store, Name: "login-ip", Limit: core.PerMinute(20), FailMode: core.FailClosed, Timeout: timeout,
	})
	if err != nil {
		return nil, err
	}
	byUser, err := core.New(core.Config{
		Store: store, Name: "login-user", Limit: core.PerHour(5), FailMode: core.FailClosed, Timeout: timeout,
	})
	if err != nil {
		return nil, err
	}
	// Only the responses of failed attempts count, per address and per
	// username: a success gives its token back.
	failed := nethttp.WithCountIf(func(_ *http.Request, status int) bool { return status >= 400 })
	users := nethttp.NewGate(byUser, failed) // the username is known only inside the handler

	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Username, Password string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Username == "" {
			http.Error(w, "want {\"username\", \"password\"}", http.StatusBadRequest)
			return
		}
		// A refusal (429, or 503 while Redis is down) is written by the
		// Gate, with Retry-After; otherwise the attempt goes on.
		users.ServeKey(w, r, "user:"+body.Username, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !checkPassword(body.Username, body.Password) {
				http.Error(w, "wrong username or password", http.StatusUnauthorized)
				return
			}
			w.Write([]byte("welcome\n"))
		}))
	})
	return nethttp.Middleware(byIP, failed)(mux), nil
}

// checkPassword stands for the app's real check.
func checkPassword(user, password string) bool { return password == "right" }

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
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}
