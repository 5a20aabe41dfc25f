package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/nethttp"
)

// Refusing from a handler with the middleware's response: an LLM
// gateway's tenant spends tokens it learns of only from the model's
// reply. Gate.ServeKey admits a request for one token and, while the
// tenant still owes for earlier replies, writes the whole 429 (the
// RateLimit-* fields, Retry-After and the problem document); the handler
// it runs charges what the reply used (core.Limiter.Charge).
func ExampleGate_ServeKey_charge() {
	tokens, err := core.New(core.Config{
		Store: core.NewMemoryStore(core.WithClock(fixed)), Name: "llm-tokens", FailMode: core.FailOpen,
		Limit: core.Limit{Rate: 1000, Period: time.Minute}, // tokens a minute per tenant
	})
	if err != nil {
		panic(err)
	}
	gate := ratelimit.NewGate(tokens) // once, at startup
	callModel := func() (used int) { return 1500 }
	generate := func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant") // found by the handler: an API key, a session
		gate.ServeKey(w, r, "tenant:"+tenant, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := tokens.Charge(r.Context(), "tenant:"+tenant, callModel())
			w.Header().Set("X-Tokens-Remaining", strconv.Itoa(res.Remaining))
			fmt.Fprintln(w, "a reply")
		}))
	}
	for range 2 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/generate", nil)
		r.Header.Set("X-Tenant", "acme")
		generate(w, r)
		fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit-Remaining"), w.Body)
	}
	// Output:
	// 200  999 a reply
	//
	// 429 31 0 {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry in 31 seconds"}
}
