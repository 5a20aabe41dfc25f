package nethttp

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Attacks on the limit through the key (issue 12): a client that invents
// the part of the key it controls. Each case is a chain of middlewares
// around a handler that counts the requests reaching it.

// attackChain is middlewares in a row, outermost first.
type attackChain []func(http.Handler) http.Handler

// reached sends the requests made by req (i = 0, 1, …, sent-1) through the
// chain and returns how many reached the handler.
func (c attackChain) reached(sent int, req func(i int) *http.Request) int {
	var n atomic.Int64
	var h http.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) })
	for i := len(c) - 1; i >= 0; i-- {
		h = c[i](h)
	}
	for i := range sent {
		h.ServeHTTP(httptest.NewRecorder(), req(i))
	}
	return int(n.Load())
}

// TestAttackAPIKeyRotation: a client sends every request with a fresh
// random API key. Keyed by the API key alone, or by the key combined with
// the address (First, Join), each request gets a bucket of its own; only a
// second limiter keyed by address that every request also passes holds
// the client.
func TestAttackAPIKeyRotation(t *testing.T) {
	t.Parallel()
	const sent, perKey, perIP = 50, 3, 10
	byKey := func(k keyfuncs.KeyFunc) func(http.Handler) http.Handler {
		return Middleware(limitertest.NewLimiter(t, core.PerMinute(perKey)), WithKey(k))
	}
	byIP := func() func(http.Handler) http.Handler {
		return Middleware(limitertest.NewLimiter(t, core.PerMinute(perIP))) // keyfuncs.IP()
	}
	apiKey := keyfuncs.Header("X-API-Key")
	req := func(int) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:1234"
		r.Header.Set("X-API-Key", rand.Text())
		return r
	}
	for _, tc := range []struct {
		name  string
		chain attackChain
		want  int // exactly how many reach the handler
	}{
		{"Header alone", attackChain{byKey(apiKey)}, sent},
		{"First(Header, IP)", attackChain{byKey(keyfuncs.First(apiKey, keyfuncs.IP()))}, sent},
		{"Join(IP, Header)", attackChain{byKey(keyfuncs.Join(keyfuncs.IP(), apiKey))}, sent},
		{"IP() limiter, then Header limiter", attackChain{byIP(), byKey(apiKey)}, perIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.chain.reached(sent, req); got != tc.want {
				t.Errorf("%d of %d requests with fresh API keys reached the handler, want %d", got, sent, tc.want)
			}
		})
	}
}

// TestAttackIPv6Rotation: a client with a /56, as households commonly get
// (a tunnel broker hands out a /48 for free), sends each request from
// another /64 of it. The default /64 key gives each request a bucket of
// its own; IPv6Prefix(56), or a second, coarser limiter keyed by /48, holds
// the client.
func TestAttackIPv6Rotation(t *testing.T) {
	t.Parallel()
	const sent, limit, coarse = 256, 3, 10
	by := func(lim int, opts ...keyfuncs.IPOption) func(http.Handler) http.Handler {
		return Middleware(limitertest.NewLimiter(t, core.PerMinute(lim)), WithKey(keyfuncs.IP(opts...)))
	}
	req := func(i int) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = fmt.Sprintf("[2001:db8:0:ab%02x::1]:443", i) // 2001:db8:0:ab00::/56, a /64 each
		return r
	}
	for _, tc := range []struct {
		name  string
		chain attackChain
		want  int // exactly how many reach the handler
	}{
		{"IP(), /64 by default", attackChain{by(limit)}, sent},
		{"IP(IPv6Prefix(56))", attackChain{by(limit, keyfuncs.IPv6Prefix(56))}, limit},
		{"IP(IPv6Prefix(48)) limiter, then IP()", attackChain{by(coarse, keyfuncs.IPv6Prefix(48)), by(limit)}, coarse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.chain.reached(sent, req); got != tc.want {
				t.Errorf("%d of %d requests from one /56 reached the handler, want %d", got, sent, tc.want)
			}
		})
	}
}
