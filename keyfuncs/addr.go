package keyfuncs

import (
	"net/netip"
	"strings"
)

// maxAddrLen bounds the text of one address (RemoteAddr, an X-Forwarded-For
// entry, a Forwarded node). The longest real one, a bracketed IPv4-mapped
// IPv6 address with a zone and a port, is about 60 bytes; anything much
// longer is garbage and is rejected before parsing.
const maxAddrLen = 128

// parseAddr parses the address forms found in RemoteAddr and forwarding
// headers: "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]" and
// "[2001:db8::1]:80", zones allowed. With obfPort, the port may also be an
// RFC 7239 obfuscated port ("_abc"). The result is normalised: zone dropped,
// IPv4-mapped IPv6 unmapped, so that ::ffff:10.0.0.1 and 10.0.0.1 are one
// address for keys and for trust alike.
//
// It reports failure with a bool, not an error, so that garbage costs no
// allocation.
func parseAddr(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" || len(s) > maxAddrLen {
		return netip.Addr{}, false
	}
	host, port, bracketed := s, "", false
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, bracketed = s[1:end], true
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, false
			}
			port = rest[1:]
			if port == "" {
				return netip.Addr{}, false
			}
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: an IPv4 address (or garbage) with a port. A
		// bare IPv6 address has at least two.
		host, port = s[:i], s[i+1:]
		if port == "" {
			return netip.Addr{}, false
		}
	}
	if port != "" && !validPort(port, obfPort) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	switch {
	case bracketed && !a.Is6():
		return netip.Addr{}, false // "[1.2.3.4]"
	case port != "" && !bracketed && !a.Is4():
		return netip.Addr{}, false // unreachable today; keeps "v6:port" out for good
	}
	return a.WithZone("").Unmap(), true
}

// validPort reports whether p is a decimal port (0–65535, at most 5 digits)
// or, with obf, an RFC 7239 obfuscated port.
func validPort(p string, obf bool) bool {
	if obf && len(p) > 1 && p[0] == '_' {
		return validObf(p[1:])
	}
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// validObf reports whether s matches 1*( ALPHA / DIGIT / "." / "_" / "-" ),
// the tail of an RFC 7239 obfuscated node or port after its "_".
func validObf(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// trimOWS trims the optional whitespace (spaces and tabs) that HTTP allows
// around list elements.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// trustSet is a list of trusted networks. Addresses are normalised by
// parseAddr before they are looked up, and the networks by parseTrusted, so
// an IPv4-mapped spelling can neither gain nor lose trust.
type trustSet []netip.Prefix

func (t trustSet) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// mappedRange is ::ffff:0.0.0.0/96, where IPv4-mapped IPv6 addresses live.
var mappedRange = netip.MustParsePrefix("::ffff:0.0.0.0/96")

// parseTrusted parses CIDRs (or single addresses) for the option named fn,
// panicking on an invalid one. An IPv4-mapped network (::ffff:10.0.0.0/104)
// becomes its IPv4 network (10.0.0.0/8), and an IPv6 network that holds all
// of ::ffff:0:0/96 (::/0, for instance) also trusts 0.0.0.0/0, because
// addresses are unmapped before the lookup.
func parseTrusted(fn string, cidrs []string) trustSet {
	t := make(trustSet, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil || a.Zone() != "" {
				panic("keyfuncs: " + fn + ": invalid CIDR " + c)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		p = p.Masked()
		switch a := p.Addr(); {
		case a.Is4In6() && p.Bits() >= 96:
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		case a.Is6() && p.Bits() <= 96 && p.Contains(mappedRange.Addr()):
			t = append(t, netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
		t = append(t, p)
	}
	return t
}
