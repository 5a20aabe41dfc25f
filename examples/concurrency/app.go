package main

import (
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// newApp returns the app: GET /export, at most 100 a minute and 2 at
// once per API key (the X-API-Key header), both decided in one Redis
// script call, all or nothing; export serves the export itself. timeout
// is each decision's Timeout (0: the default, 50 ms).
func newApp(store core.Store, timeout time.Duration, export http.Handler) (http.Handler, error) {
	perMinute, err := core.New(core.Config{
		Store: store, Name: "exports-per-minute", Limit: core.PerMinute(100), FailMode: core.FailClosed,
		Timeout: timeout,
	})
	if err != nil {
		return nil, err
	}
	exports, err := core.NewConcurrency(core.ConcurrencyConfig{
		Store:    store,
		Name:     "exports", // instances share slots by Name
		Max:      2,
		Lease:    30 * time.Second, // a crashed holder's slot is free after this
		FailMode: core.FailClosed,  // Redis down: 503
		Rate:     perMinute,        // a slot and a token, or neither
		Timeout:  timeout,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /export", nethttp.Concurrency(exports, nethttp.WithKey(keyfuncs.Header("X-API-Key")))(export))
	return mux, nil
}
