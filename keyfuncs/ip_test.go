package keyfuncs

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// request returns a GET request from remote with the given header lines;
// each pair is name, value, and a name may repeat.
func request(remote string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

type keyCase struct {
	name    string
	r       *http.Request
	want    string // key, when wantErr is nil
	wantErr error
}

// runKeys runs fn on every case and compares key and error.
func runKeys(t *testing.T, fn KeyFunc, cases []keyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fn(tc.r)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got key %q, error %v; want error %v", got, err, tc.wantErr)
				}
				if got != "" {
					t.Errorf("got key %q with error %v; want no key", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestIPNormalisation(t *testing.T) {
	t.Parallel()
	runKeys(t, IP(), []keyCase{
		{"ipv4 with port", request("203.0.113.7:1234"), "ip:203.0.113.7", nil},
		{"ipv4 bare", request("203.0.113.7"), "ip:203.0.113.7", nil},
		{"ipv6 with port", request("[2001:db8:1:2:3:4:5:6]:443"), "ip:2001:db8:1:2::/64", nil},
		{"ipv6 bracketed without port", request("[2001:db8:1:2::9]"), "ip:2001:db8:1:2::/64", nil},
		{"ipv6 bare", request("2001:db8:1:2::9"), "ip:2001:db8:1:2::/64", nil},
		{"ipv6 same /64 shares a key", request("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"), "ip:2001:db8:1:2::/64", nil},
		{"ipv6 next /64 does not", request("[2001:db8:1:3::1]:1"), "ip:2001:db8:1:3::/64", nil},
		{"ipv6 zone dropped", request("[fe80::1%eth0]:80"), "ip:fe80::/64", nil},
		{"ipv6 bare zone dropped", request("fe80::1%25eth0"), "ip:fe80::/64", nil},
		{"ipv4-mapped unmapped before prefix", request("[::ffff:10.0.0.1]:80"), "ip:10.0.0.1", nil},
		{"ipv4-mapped bare", request("::ffff:203.0.113.7"), "ip:203.0.113.7", nil},
		{"ipv4-mapped hex form", request("[::ffff:cb00:7107]:80"), "ip:203.0.113.7", nil},
		{"loopback v6", request("[::1]:80"), "ip:::/64", nil},
		{"leading zeros in ipv4 rejected", request("010.0.0.1:80"), "", ErrInvalidAddr},
		{"empty remote addr", request(""), "", ErrInvalidAddr},
		{"unix socket", request("@"), "", ErrInvalidAddr},
		{"hostname", request("localhost:80"), "", ErrInvalidAddr},
		{"ipv6 port without brackets", request("2001:db8::1:80:"), "", ErrInvalidAddr},
		{"bracketed ipv4", request("[203.0.113.7]:80"), "", ErrInvalidAddr},
		{"empty port", request("203.0.113.7:"), "", ErrInvalidAddr},
		{"port out of range", request("203.0.113.7:65536"), "", ErrInvalidAddr},
		{"port not numeric", request("203.0.113.7:http"), "", ErrInvalidAddr},
		{"junk after bracket", request("[::1]x80"), "", ErrInvalidAddr},
		{"unterminated bracket", request("[::1:80"), "", ErrInvalidAddr},
	})
}

func TestIPPrefixes(t *testing.T) {
	t.Parallel()
	t.Run("ipv4 /24", func(t *testing.T) {
		runKeys(t, IP(IPv4Prefix(24)), []keyCase{
			{"plain", request("203.0.113.7:1"), "ip:203.0.113.0/24", nil},
			{"mapped", request("[::ffff:203.0.113.200]:1"), "ip:203.0.113.0/24", nil},
			{"ipv6 keeps /64", request("[2001:db8::1]:1"), "ip:2001:db8::/64", nil},
		})
	})
	t.Run("ipv6 /48 and /128", func(t *testing.T) {
		runKeys(t, IP(IPv6Prefix(48)), []keyCase{
			{"/48", request("[2001:db8:1:2::1]:1"), "ip:2001:db8:1::/48", nil},
			{"ipv4 keeps /32", request("203.0.113.7:1"), "ip:203.0.113.7", nil},
		})
		runKeys(t, IP(IPv6Prefix(128)), []keyCase{
			{"/128 prints the address", request("[2001:db8:1:2::1]:1"), "ip:2001:db8:1:2::1", nil},
		})
	})
	t.Run("last option wins", func(t *testing.T) {
		runKeys(t, IP(IPv4Prefix(8), IPv4Prefix(16)), []keyCase{
			{"/16", request("203.0.113.7:1"), "ip:203.0.0.0/16", nil},
		})
	})
}

func TestIPPanics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"IPv4Prefix 0", func() { IPv4Prefix(0) }},
		{"IPv4Prefix 33", func() { IPv4Prefix(33) }},
		{"IPv6Prefix 0", func() { IPv6Prefix(0) }},
		{"IPv6Prefix 129", func() { IPv6Prefix(129) }},
		{"invalid CIDR", func() { TrustedProxies("10.0.0.0/33") }},
		{"hostname as CIDR", func() { TrustedProxies("proxy.internal") }},
		{"zone in trusted address", func() { TrustedProxies("fe80::1%eth0") }},
		{"invalid TrustedHeader CIDR", func() { TrustedHeader("X-Real-IP", "nope") }},
		{"empty TrustedHeader name", func() { TrustedHeader("", "10.0.0.0/8") }},
		{"nil option", func() { IP(nil) }},
		{"TrustedHeader with TrustedProxies", func() { IP(TrustedProxies("10.0.0.0/8"), TrustedHeader("X-Real-IP", "10.0.0.0/8")) }},
		{"TrustedHeader twice", func() { IP(TrustedHeader("X-Real-IP", "10.0.0.0/8"), TrustedHeader("CF-Connecting-IP", "10.0.0.0/8")) }},
		{"ForwardedHeader alone", func() { IP(ForwardedHeader()) }},
		{"Header empty name", func() { Header("") }},
		{"User nil", func() { User(nil) }},
		{"ContextValue nil", func() { ContextValue(nil) }},
		{"First empty", func() { First() }},
		{"Join nil", func() { Join(IP(), nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("got no panic; want one")
				}
			}()
			tc.f()
		})
	}
}

func TestParseTrusted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cidrs []string
		addr  string
		want  bool
	}{
		{"ipv4 network", []string{"10.0.0.0/8"}, "10.1.2.3", true},
		{"unmasked network", []string{"10.9.9.9/8"}, "10.1.2.3", true},
		{"single address", []string{"192.0.2.1"}, "192.0.2.1", true},
		{"single address, neighbour", []string{"192.0.2.1"}, "192.0.2.2", false},
		{"mapped network becomes ipv4", []string{"::ffff:10.0.0.0/104"}, "10.1.2.3", true},
		{"mapped single address", []string{"::ffff:192.0.2.1"}, "192.0.2.1", true},
		{"::/0 trusts ipv4 too", []string{"::/0"}, "203.0.113.7", true},
		{"ipv6 network does not trust ipv4", []string{"2001:db8::/32"}, "203.0.113.7", false},
		{"ipv4 network does not trust ipv6", []string{"0.0.0.0/0"}, "2001:db8::1", false},
		{"ipv6 network", []string{"fd00::/8"}, "fd12::1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := parseAddr(tc.addr, false)
			if !ok {
				t.Fatalf("parseAddr(%q) failed", tc.addr)
			}
			if got := parseTrusted("test", tc.cidrs).contains(a); got != tc.want {
				t.Errorf("contains(%s) = %v; want %v", tc.addr, got, tc.want)
			}
		})
	}
}

// TestIPAllocs guards the plain RemoteAddr path: the key string is its only
// allocation.
func TestIPAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   KeyFunc
		r    *http.Request
		max  float64
	}{
		{"ipv4", IP(), request("203.0.113.7:1234"), 1},
		{"ipv6", IP(), request("[2001:db8:1:2::7]:1234"), 1},
		{"trusted proxies, 3-entry XFF", IP(TrustedProxies("10.0.0.0/8")), request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.0.0.2"), 1},
		{"forwarded, 2 elements", IP(TrustedProxies("10.0.0.0/8"), ForwardedHeader()), request("10.0.0.1:1", "Forwarded", `for="[2001:db8::1]:4711", for=10.0.0.2`), 1},
		{"header", Header("X-API-Key"), request("203.0.113.7:1", "X-API-Key", "secret"), 1},
		{"trusted peer without the header", IP(TrustedHeader("X-Real-IP", "10.0.0.0/8")), request("10.0.0.1:1"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := testing.AllocsPerRun(100, func() { _, _ = tc.fn(tc.r) })
			if got > tc.max {
				t.Errorf("got %v allocs per run; want at most %v", got, tc.max)
			}
		})
	}
}

func BenchmarkIP(b *testing.B) {
	for _, bc := range []struct {
		name string
		fn   KeyFunc
		r    *http.Request
	}{
		{"RemoteAddr/v4", IP(), request("203.0.113.7:1234")},
		{"RemoteAddr/v6", IP(), request("[2001:db8:1:2::7]:1234")},
		{"TrustedProxies/XFF3", IP(TrustedProxies("10.0.0.0/8", "fd00::/8")), request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.0.0.2")},
		{"TrustedProxies/Forwarded3", IP(TrustedProxies("10.0.0.0/8", "fd00::/8"), ForwardedHeader()), request("10.0.0.1:1", "Forwarded", `for=198.51.100.1, for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`)},
		{"TrustedHeader", IP(TrustedHeader("CF-Connecting-IP", "10.0.0.0/8")), request("10.0.0.1:1", "CF-Connecting-IP", "203.0.113.7")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn(bc.r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
