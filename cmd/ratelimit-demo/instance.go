package main

import (
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// instance is one app instance: the app (hello) behind the ratelimit
// middleware sharing the limit through Redis. For the comparison it also asks
// an in-memory limiter of its own about every request, without enforcing it.
type instance struct {
	demo    *demo
	index   int
	name    string
	url     string
	limited http.Handler  // nethttp.Middleware(shared limiter)(hello)
	local   *core.Limiter // the same limit on a MemoryStore of its own
}

func (in *instance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Served-By", in.name)
	t := in.demo.tally.Load()
	if t == nil {
		in.limited.ServeHTTP(w, r)
		return
	}
	localOK := false
	if key, err := in.demo.key(r); err == nil {
		res, _ := in.local.Allow(r.Context(), key)
		localOK = res.Allowed
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	in.limited.ServeHTTP(sw, r)
	// A degraded decision (Redis did not answer in time; FailOpen allowed)
	// carries no RateLimit fields: the limit did not decide it.
	degraded := sw.status == http.StatusOK && w.Header().Get("RateLimit-Limit") == ""
	// Recorded after the shared decision: its token was taken by now.
	t.record(time.Now(), in.index, sw.status == http.StatusOK && !degraded, localOK)
}

func (in *instance) hello(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("hello from " + in.name + "\n"))
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
