package nethttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

// fixed is a clock that stands still, so the example's output is exact.
func fixed() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func Example() {
	lim, err := core.New(core.Config{
		Store:    core.NewMemoryStore(core.WithClock(fixed)),
		Limit:    core.PerMinute(3),
		FailMode: core.FailOpen, // store down: allow (see core.FailMode)
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	handler := ratelimit.Middleware(lim)(mux)

	for range 4 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		h := w.Header()
		fmt.Printf("%d Remaining=%s Reset=%s Policy=%s Retry-After=%q\n",
			w.Code, h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), h.Get("RateLimit-Policy"), h.Get("Retry-After"))
	}
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
	fmt.Println(w.Header().Get("Content-Type"))
	fmt.Println(w.Body)
	// Output:
	// 200 Remaining=2 Reset=20 Policy=3;w=60 Retry-After=""
	// 200 Remaining=1 Reset=40 Policy=3;w=60 Retry-After=""
	// 200 Remaining=0 Reset=60 Policy=3;w=60 Retry-After=""
	// 429 Remaining=0 Reset=20 Policy=3;w=60 Retry-After="20"
	// application/problem+json
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 20 seconds"}
}

// A limit per API key does not hold a client that invents keys: each new
// key is a new bucket, alone or joined with the address (keyfuncs.First,
// keyfuncs.Join). A second limiter keyed by address, which every request
// passes first, bounds what one client gets whatever keys it sends.
func ExampleMiddleware_perAddressAndPerKey() {
	store := core.NewMemoryStore(core.WithClock(fixed))
	perIP, err := core.New(core.Config{Store: store, Name: "per-ip", Limit: core.PerMinute(10), FailMode: core.FailOpen})
	if err != nil {
		panic(err)
	}
	perKey, err := core.New(core.Config{Store: store, Name: "per-key", Limit: core.PerMinute(3), FailMode: core.FailOpen})
	if err != nil {
		panic(err)
	}
	byIP := ratelimit.Middleware(perIP) // keyfuncs.IP(), the default
	byKey := ratelimit.Middleware(perKey, ratelimit.WithKey(keyfuncs.Header("X-API-Key")))

	reached := 0
	handler := byIP(byKey(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ })))
	for i := range 50 {
		r := httptest.NewRequest("GET", "/", nil) // from 192.0.2.1 every time
		r.Header.Set("X-API-Key", fmt.Sprint("invented-", i))
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	fmt.Println(reached, "of 50 reached the handler")
	// Output: 10 of 50 reached the handler
}

// Per-route limits by pattern: /users/1 and /users/2 share the limit of
// "GET /users/{id}"; other routes use the default limiter.
func ExampleWithRoutes() {
	newLimiter := func(l core.Limit) *core.Limiter {
		lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: l, FailMode: core.FailOpen})
		if err != nil {
			panic(err)
		}
		return lim
	}
	mux := http.NewServeMux()
	ok := func(http.ResponseWriter, *http.Request) {}
	mux.HandleFunc("GET /users/{id}", ok)
	mux.HandleFunc("GET /", ok)
	handler := ratelimit.Middleware(newLimiter(core.PerMinute(100)),
		ratelimit.WithRoutes(map[string]*core.Limiter{"GET /users/{id}": newLimiter(core.PerMinute(2))}),
	)(mux) // wrapping the mux itself: the middleware asks it where each request goes

	for _, path := range []string{"/users/1", "/users/2", "/users/3", "/about"} {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code, w.Header().Get("RateLimit-Limit"))
	}
	// Output:
	// /users/1 200 2
	// /users/2 200 2
	// /users/3 429 2
	// /about 200 100
}

// An adapter for another router builds one Gate for its router and
// calls Gate.Serve per request. Here a handler stands in for the router,
// whose route pattern for the request is "/items/:id".
func ExampleGate_Serve() {
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: core.PerSecond(1), FailMode: core.FailClosed})
	if err != nil {
		panic(err)
	}
	router := ratelimit.Router{Name: "myrouter", ColonParams: true}
	gate := router.NewGate(lim, ratelimit.WithHeaders(ratelimit.HeadersDraft11))
	items := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "item") })
	handler := func(w http.ResponseWriter, r *http.Request) {
		gate.Serve(w, r, ratelimit.Chain{
			Route: func() string { return "/items/:id" }, // the router's pattern
			Next: func(w http.ResponseWriter) int {
				items.ServeHTTP(w, r) // the rest of the chain, writing to w
				return http.StatusOK
			},
		})
	}
	for range 2 {
		w := httptest.NewRecorder()
		handler(w, httptest.NewRequest("GET", "/items/7", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "1-per-1s";r=0;t=1
	// 429 "1-per-1s";r=0;t=1
}

// Limiting inside a handler: the key is known only once the handler has
// read the request, here a username from a JSON body. Three failed
// attempts per username a minute (WithCountIf: a success costs nothing);
// the fourth failure gets the middleware's 429, with its header fields
// (RateLimit-*, Retry-After: 20) and problem document.
func ExampleGate_ServeKey() {
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(core.WithClock(fixed)), Limit: core.PerMinute(3), Name: "login", FailMode: core.FailClosed})
	if err != nil {
		panic(err)
	}
	failed := func(_ *http.Request, status int) bool { return status >= 400 }
	attempts := ratelimit.NewGate(lim, ratelimit.WithCountIf(failed)) // once, at startup
	login := func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Username, Password string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Username == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		attempts.ServeKey(w, r, "user:"+body.Username, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if body.Password != "right" {
				http.Error(w, "wrong password", http.StatusUnauthorized)
				return
			}
			fmt.Fprintln(w, "welcome")
		}))
	}
	for _, password := range []string{"right", "wrong", "right", "wrong", "wrong", "wrong"} {
		w := httptest.NewRecorder()
		login(w, httptest.NewRequest("POST", "/login", strings.NewReader(`{"username":"alice","password":"`+password+`"}`)))
		fmt.Print(w.Code, " ", w.Body)
	}
	// Output:
	// 200 welcome
	// 401 wrong password
	// 200 welcome
	// 401 wrong password
	// 401 wrong password
	// 429 {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 20 seconds"}
}
