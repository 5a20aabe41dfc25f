package chi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// TestAttackSpoofedForwardedFor (issue 12): a client writes a new
// X-Forwarded-For with each request. With middleware.RealIP in front of
// the limiter, RemoteAddr is whatever the client wrote, and every request
// gets a bucket of its own: the pitfall the README warns of. Without it,
// the default key and TrustedProxies hold the client to the limit, whether
// it connects directly or through a trusted proxy that appends its address.
func TestAttackSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	const sent, limit = 8, 3
	for _, tc := range []struct {
		name    string
		realIP  bool
		key     keyfuncs.KeyFunc
		proxied bool // through a proxy at 10.0.0.1 that appends the client's address
		want    int  // exactly how many reach the handler
	}{
		{"pitfall: RealIP, then IP()", true, keyfuncs.IP(), false, sent},
		{"IP()", false, keyfuncs.IP(), false, limit},
		{"TrustedProxies, client direct", false, keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")), false, limit},
		{"TrustedProxies, through the proxy", false, keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")), true, limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached := 0
			r := chi.NewRouter()
			if tc.realIP {
				//lint:ignore SA1019 deprecated for the very reason this case shows
				r.Use(middleware.RealIP)
			}
			r.Use(ratelimit.Middleware(limitertest.NewLimiter(t, core.PerMinute(limit)), ratelimit.WithKey(tc.key)))
			r.Get("/", func(http.ResponseWriter, *http.Request) { reached++ })
			for i := range sent {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.RemoteAddr = "203.0.113.7:1234"
				xff := "198.51.100." + strconv.Itoa(i+1) // forged
				if tc.proxied {
					req.RemoteAddr = "10.0.0.1:1234"
					xff += ", 203.0.113.7"
				}
				req.Header.Set("X-Forwarded-For", xff)
				r.ServeHTTP(httptest.NewRecorder(), req)
			}
			if reached != tc.want {
				t.Errorf("%d of %d requests with rotating X-Forwarded-For reached the handler, want %d", reached, sent, tc.want)
			}
		})
	}
}
