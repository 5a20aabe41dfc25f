package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

// One export at a time per client address: a second request while the
// first runs is refused with 429 and Retry-After: 1 (a slot frees
// whenever a holder finishes).
func ExampleConcurrency() {
	exports, err := core.NewConcurrency(core.ConcurrencyConfig{
		Store:    core.NewMemoryStore(core.WithClock(fixed)),
		Name:     "exports",
		Max:      1,
		FailMode: core.FailClosed,
	})
	if err != nil {
		panic(err)
	}
	var second *httptest.ResponseRecorder
	var h http.Handler
	h = ratelimit.Concurrency(exports)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if second == nil { // while this request runs, another comes in
			second = httptest.NewRecorder()
			h.ServeHTTP(second, httptest.NewRequest(http.MethodGet, "/export", nil))
		}
		fmt.Fprintln(w, "exported")
	}))
	first := httptest.NewRecorder()
	h.ServeHTTP(first, httptest.NewRequest(http.MethodGet, "/export", nil))
	fmt.Println(first.Code, second.Code, second.Header().Get("Retry-After"), second.Header().Get("RateLimit-Limit"))
	// Output:
	// 200 429 1 1
}
