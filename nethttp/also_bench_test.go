package nethttp

import (
	"net/http"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// BenchmarkWithAlso is the allowed path of a middleware with two WithAlso
// (a tenant's limit and a global ceiling) on the memory store, against
// the same middleware without them: what deciding three checks in one
// core.AllowAll costs beside one AllowN.
//
//	go test -run '^$' -bench BenchmarkWithAlso -benchmem ./nethttp
func BenchmarkWithAlso(b *testing.B) {
	for _, also := range []bool{false, true} {
		name := "one"
		if also {
			name = "also-2"
		}
		b.Run(name, func(b *testing.B) {
			h, w, r := alsoSetupBench(b, also)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}

// alsoSetupBench is a middleware per client, with (also) two WithAlso
// for a tenant and a global ceiling, on the memory store, a request and
// a writer to reuse.
func alsoSetupBench(tb testing.TB, also bool) (http.Handler, *discardWriter, *http.Request) {
	store := core.NewMemoryStore(core.WithClock(limitertest.Stepping()))
	mk := func(name string) *core.Limiter {
		return limitertest.New(tb, core.Config{Store: store, Name: name, Limit: core.PerSecond(50), FailMode: core.FailOpen})
	}
	var opts []Option
	if also {
		opts = []Option{WithAlso(mk("tenant"), limitertest.ConstantKey), WithAlso(mk("global"), limitertest.ConstantKey)}
	}
	h := Middleware(mk("client"), opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return h, &discardWriter{h: make(http.Header, 8)}, r
}

// TestWithAlsoAllocs: two WithAlso cost a request two allocations more
// than the middleware alone: the checks, and core.AllowAll's one.
func TestWithAlsoAllocs(t *testing.T) {
	var got [2]float64
	for i, also := range []bool{false, true} {
		h, w, r := alsoSetupBench(t, also)
		got[i] = testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
	}
	if got[1] > got[0]+2 {
		t.Errorf("%v allocs per request with two WithAlso, %v without; want at most 2 more", got[1], got[0])
	}
}
