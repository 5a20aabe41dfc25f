package keyfuncs

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

var fuzzTrusted = []string{"10.0.0.0/8", "fd00::/8", "::ffff:192.0.2.0/120"}

// checkKey holds the invariants every KeyFunc result keeps: an error and no
// key, or a non-empty key of printable ASCII without spaces or braces.
func checkKey(t *testing.T, what, k string, err error) {
	t.Helper()
	if err != nil {
		if k != "" {
			t.Fatalf("%s: got key %q with error %v", what, k, err)
		}
		return
	}
	if k == "" {
		t.Fatalf("%s: got an empty key and no error", what)
	}
	if !isPrintable(k, 0) {
		t.Fatalf("%s: got key %q with a control, space, brace or non-ASCII byte", what, k)
	}
}

// checkIPKey also checks that an IP key holds a normalised address or network.
func checkIPKey(t *testing.T, what, k string, err error) {
	t.Helper()
	checkKey(t, what, k, err)
	if err != nil {
		return
	}
	s, ok := strings.CutPrefix(k, "ip:")
	if !ok {
		t.Fatalf("%s: got key %q; want the ip: prefix", what, k)
	}
	a, perr := netip.ParseAddr(s)
	if perr != nil {
		p, pperr := netip.ParsePrefix(s)
		if pperr != nil || p != p.Masked() {
			t.Fatalf("%s: got key %q; want an address or a masked network", what, k)
		}
		a = p.Addr()
	}
	if a.Is4In6() || a.Zone() != "" {
		t.Fatalf("%s: got key %q; want it unmapped and without zone", what, k)
	}
}

// peerTrusted reports whether RemoteAddr parses and is in cidrs.
func peerTrusted(remote string, cidrs []string) bool {
	a, ok := parseAddr(remote, false)
	return ok && parseTrusted("fuzz", cidrs).contains(a)
}

func FuzzIP(f *testing.F) {
	for _, s := range [][3]string{
		{"203.0.113.7:1234", "", ""},
		{"10.0.0.1:1", "198.51.100.66, 203.0.113.7", ""},
		{"10.0.0.1:1", "198.51.100.66", "203.0.113.7, 10.0.0.2"},
		{"[::ffff:10.0.0.1]:1", "::ffff:203.0.113.7, ::ffff:10.0.0.2", ""},
		{"[fd00::1%eth0]:80", "[2001:db8::1]:4711, fd00::2%eth1", ""},
		{"192.0.2.9:1", "unknown, 10.0.0.2", "garbage"},
		{"[::1]:80", "10.0.0.2,,10.0.0.3", ""},
		{"@", "1.2.3.4", ""},
		{"010.0.0.1:1", "1.2.3.4:99999", "[1.2.3.4]"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	plain := IP()
	xff := IP(TrustedProxies(fuzzTrusted...), IPv4Prefix(24), IPv6Prefix(48))
	remoteOnly := IP(IPv4Prefix(24), IPv6Prefix(48)) // xff without the trust
	hdr := IP(TrustedHeader("X-Real-IP", fuzzTrusted...))
	f.Fuzz(func(t *testing.T, remote, line1, line2 string) {
		r := request(remote, "X-Forwarded-For", line1, "X-Forwarded-For", line2, "X-Real-IP", line1)
		kp, errp := plain(r)
		checkIPKey(t, "IP()", kp, errp)
		kx, errx := xff(r)
		checkIPKey(t, "TrustedProxies", kx, errx)
		kh, errh := hdr(r)
		checkIPKey(t, "TrustedHeader", kh, errh)
		if !peerTrusted(remote, fuzzTrusted) {
			// Forwarding headers from an untrusted peer never make the key.
			if kh != kp || (errh == nil) != (errp == nil) {
				t.Fatalf("untrusted peer %q: TrustedHeader got %q, %v; want RemoteAddr's %q, %v", remote, kh, errh, kp, errp)
			}
			if want, _ := remoteOnly(r); kx != want {
				t.Fatalf("untrusted peer %q: TrustedProxies got %q, %v; want RemoteAddr's %q", remote, kx, errx, want)
			}
		}
	})
}

func FuzzForwarded(f *testing.F) {
	for _, s := range [][3]string{
		{"10.0.0.1:1", "for=203.0.113.7", ""},
		{"10.0.0.1:1", `for="[2001:db8:cafe::17]:4711";proto=https`, ""},
		{"10.0.0.1:1", "for=198.51.100.66, for=unknown", "for=_hidden;by=10.0.0.1"},
		{"10.0.0.1:1", `for="_SEVKISEK:_abc", For=10.0.0.2:80`, ""},
		{"10.0.0.1:1", `for=198.51.100.66;host="a, for=10.0.0.2"`, ""},
		{"10.0.0.1:1", `for="198.51.100.66, for=203.0.113.7`, `for="\"`},
		{"10.0.0.1:1", "for=10.0.0.2;for=1.2.3.4,,;;", "proto=https"},
		{"203.0.113.7:1", "for=198.51.100.66", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	plain := IP()
	fwd := IP(TrustedProxies(fuzzTrusted...), ForwardedHeader())
	f.Fuzz(func(t *testing.T, remote, line1, line2 string) {
		r := request(remote, "Forwarded", line1, "Forwarded", line2)
		k, err := fwd(r)
		checkIPKey(t, "Forwarded", k, err)
		if !peerTrusted(remote, fuzzTrusted) {
			if want, _ := plain(r); k != want {
				t.Fatalf("untrusted peer %q: got %q, %v; want RemoteAddr's %q", remote, k, err, want)
			}
		}
		// A single element parses the same on its own line.
		var ring [MaxHops + 1]string
		if n, ok := forwardedElements(line1, &ring); ok && n == 1 {
			a1, err1 := forwardedFor(line1)
			a2, err2 := walkForwarded([]string{line1}, nil)
			if a1 != a2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%q: forwardedFor %v, %v; walk %v, %v", line1, a1, err1, a2, err2)
			}
		}
	})
}

func FuzzHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"secret", ""},
		{" padded\t", ""},
		{"", ""},
		{"a", "b"},
		{"{slot}\r\nX-Injected: 1", ""},
		{strings.Repeat("k", MaxValueLen), ""},
		{strings.Repeat("k", MaxValueLen+1), ""},
	} {
		f.Add(s[0], s[1])
	}
	hdr := Header("X-API-Key")
	user := User(func(r *http.Request) (string, error) { return r.Header.Get("X-API-Key"), nil })
	join := Join(IP(), hdr, user)
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		r := request("203.0.113.7:1", "X-API-Key", v1)
		if v2 != "" {
			r.Header.Add("X-API-Key", v2)
		}
		k, err := hdr(r)
		checkKey(t, "Header", k, err)
		if err == nil && (len(k) != 26 || !strings.HasPrefix(k, "hdr:")) {
			t.Fatalf("got %q; want hdr: and 22 characters", k)
		}
		if want := v2 == "" && trimOWS(v1) != "" && len(trimOWS(v1)) <= MaxValueLen; (err == nil) != want {
			t.Fatalf("%q, %q: got %q, %v; want success %v", v1, v2, k, err, want)
		}
		ku, erru := user(r)
		checkKey(t, "User", ku, erru)
		kj, errj := join(r)
		checkKey(t, "Join", kj, errj)
		if (errj == nil) != (err == nil && erru == nil) {
			t.Fatalf("Join got %q, %v; want success only when every part succeeds (%v, %v)", kj, errj, err, erru)
		}
	})
}
