package keyfuncs_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Behind a load balancer on 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the rightmost address that is not one of the proxies; what the
// client wrote itself, on the left, does not count.
func Example() {
	key := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:51234"                               // the load balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.66, 203.0.113.7") // forged, real
	fmt.Println(key(r))

	r.RemoteAddr = "192.0.2.10:40000" // not a trusted proxy: its header is ignored
	fmt.Println(key(r))
	// Output:
	// ip:203.0.113.7 <nil>
	// ip:192.0.2.10 <nil>
}

func ExampleIP() {
	key := keyfuncs.IP()
	for _, addr := range []string{"203.0.113.7:1234", "[::ffff:203.0.113.7]:1234", "[2001:db8:1:2::7]:443"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		fmt.Println(key(r))
	}
	// Output:
	// ip:203.0.113.7 <nil>
	// ip:203.0.113.7 <nil>
	// ip:2001:db8:1:2::/64 <nil>
}

func ExampleTrustedHeader() {
	// Behind Cloudflare: believe CF-Connecting-IP from Cloudflare's ranges
	// only (two of them here; use the full published list).
	key := keyfuncs.IP(keyfuncs.TrustedHeader("CF-Connecting-IP", "173.245.48.0/20", "2400:cb00::/32"))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "173.245.48.5:443"
	r.Header.Set("CF-Connecting-IP", "203.0.113.7")
	fmt.Println(key(r))

	r.Header.Del("CF-Connecting-IP")
	r.Header.Set("X-Forwarded-For", "203.0.113.7") // never a fallback
	fmt.Println(key(r))                            // the edge's own request: its address
	// Output:
	// ip:203.0.113.7 <nil>
	// ip:173.245.48.5 <nil>
}

func ExampleForwardedHeader() {
	key := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ForwardedHeader())

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:51234"
	r.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`)
	fmt.Println(key(r))

	r.Header.Set("Forwarded", "for=_hidden, for=10.0.0.2")
	_, err := key(r)
	fmt.Println(err)
	// Output:
	// ip:2001:db8:cafe::/64 <nil>
	// keyfuncs: client not identified
}

func ExampleHeader() {
	key := keyfuncs.Header("X-API-Key")

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "secret")
	fmt.Println(key(r))

	r.Header.Del("X-API-Key")
	_, err := key(r)
	fmt.Println(err)
	// Output:
	// hdr:XMa0Eajb6m7UnTeL27ktGw <nil>
	// keyfuncs: missing header "X-Api-Key"
}

func ExampleFirst() {
	// API clients by their key, everyone else by address.
	key := keyfuncs.First(keyfuncs.Header("X-API-Key"), keyfuncs.IP())

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:1234"
	fmt.Println(key(r))
	// Output:
	// ip:203.0.113.7 <nil>
}

func ExampleJoin() {
	// One bucket per user and address.
	key := keyfuncs.Join(keyfuncs.ContextUser(), keyfuncs.IP())

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:1234"
	r = r.WithContext(keyfuncs.WithUser(r.Context(), "alice"))
	fmt.Println(key(r))
	// Output:
	// join:user:alice|ip:203.0.113.7 <nil>
}
