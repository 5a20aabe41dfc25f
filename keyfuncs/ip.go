package keyfuncs

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
)

// MaxHops is the most trusted proxies that a forwarding-header walk passes
// before it gives up with ErrInvalidForwarding. Real chains have a handful.
const MaxHops = 32

// IPOption configures IP. A nil IPOption makes IP panic.
type IPOption func(*ipConfig)

type ipConfig struct {
	v4bits, v6bits int

	proxies    trustSet // TrustedProxies
	useProxies bool
	forwarded  bool // ForwardedHeader: walk Forwarded instead of X-Forwarded-For

	header      string   // TrustedHeader, canonical
	headerPeers trustSet // TrustedHeader
	useHeader   bool

	errMissing, errRepeated, errInvalid error // for header, built once

	// Each logged once per KeyFunc, to logger: a RemoteAddr without a
	// port, a trusted peer's request without its forwarding header.
	logger                           *slog.Logger
	loggedNoPort, loggedNoForwarding atomic.Bool
}

// Logger sets where IP reports, once each, what a request shows about the
// server's own setup: a RemoteAddr a middleware rewrote from request
// headers (it has no port), a trusted proxy's request without its
// forwarding header. Default slog.Default(). The middlewares' default key
// (nethttp and every adapter, without WithKey) is IP(Logger(l)) with l
// their WithLogger's; give Logger to a key passed to WithKey likewise. It
// panics on nil.
func Logger(l *slog.Logger) IPOption {
	if l == nil {
		panic("keyfuncs: Logger(nil)")
	}
	return func(c *ipConfig) { c.logger = l }
}

// log returns c's logger.
func (c *ipConfig) log() *slog.Logger {
	if c.logger == nil {
		return slog.Default()
	}
	return c.logger
}

// peer parses RemoteAddr. One without a port was not written by net/http
// but by a middleware from request headers (chi's middleware.RealIP, for
// one), which any client sets: it is used, and logged once, loudly,
// without the address.
func (c *ipConfig) peer(r *http.Request) (netip.Addr, bool) {
	a, ok := parseAddr(r.RemoteAddr, false)
	if ok && !c.loggedNoPort.Load() && !hasPort(r.RemoteAddr) && c.loggedNoPort.CompareAndSwap(false, true) {
		c.log().Error("keyfuncs: RemoteAddr has no port: a middleware rewrote it from request headers " +
			"(chi's middleware.RealIP, for one), which any client can set, so clients choose their own " +
			"rate-limit keys; remove that middleware and trust proxies with TrustedProxies or TrustedHeader")
	}
	return a, ok
}

// hasPort reports whether an address that parseAddr accepted carries a
// port: "[v6]:port", or one colon (IPv4 with a port; bare IPv6 has two).
func hasPort(s string) bool {
	if s[0] == '[' {
		return strings.Contains(s, "]:")
	}
	i := strings.IndexByte(s, ':')
	return i >= 0 && strings.IndexByte(s[i+1:], ':') < 0
}

// unforwarded keys a trusted peer's request that came without the
// forwarding header (a load balancer's health check, a kubelet probe) by
// the peer's own address, and logs that once.
func (c *ipConfig) unforwarded(peer netip.Addr, header string) string {
	if !c.loggedNoForwarding.Load() && c.loggedNoForwarding.CompareAndSwap(false, true) {
		c.log().Warn("keyfuncs: a trusted proxy sent a request without its forwarding header "+
			"(a health check?): such requests are keyed by the proxy's own address", "header", header)
	}
	return c.key(peer)
}

// IPv4Prefix sets the length of the network that IPv4 clients are grouped
// by; the default is 32 (one key per address). IPv4Prefix(24) puts a whole
// /24 in one bucket. It panics unless 1 <= bits <= 32.
func IPv4Prefix(bits int) IPOption {
	if bits < 1 || bits > 32 {
		panic("keyfuncs: IPv4Prefix: bits out of range [1,32]: " + strconv.Itoa(bits))
	}
	return func(c *ipConfig) { c.v4bits = bits }
}

// IPv6Prefix sets the length of the network that IPv6 clients are grouped
// by; the default is 64, the smallest allocation one subscriber gets, so a
// client cannot escape its limit by rotating through its own /64. It is not
// the largest: households commonly get a /56 (256 /64s) and tunnel brokers
// hand out /48s for free, so a /64 limit does not stop one client rotating
// through its /56 or /48. Where that matters, key by IPv6Prefix(56), or
// pass every request also through a second limiter with a coarser limit
// keyed by IPv6Prefix(48). It panics unless 1 <= bits <= 128.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic("keyfuncs: IPv6Prefix: bits out of range [1,128]: " + strconv.Itoa(bits))
	}
	return func(c *ipConfig) { c.v6bits = bits }
}

// TrustedProxies makes IP believe X-Forwarded-For, but only from a peer
// (RemoteAddr) inside one of cidrs. All X-Forwarded-For lines are read in
// order as one list, which is walked from the right, passing addresses
// inside cidrs; the first address outside them is the client. The leftmost
// entry, which the client wrote, is never taken on its own say-so.
//
// When every entry is trusted, the leftmost one is the client (the last
// address walked). An entry that is not an IP address, or a walk past more
// than MaxHops trusted entries, is ErrInvalidForwarding: the walk never
// skips garbage to reach an address further left. A trusted peer that sends
// no X-Forwarded-For is ErrMissingHeader rather than a key for the proxy
// itself, which would put every client in one bucket.
//
// cidrs are networks such as "10.0.0.0/8" or "fd00::/8", or single addresses.
// Calling TrustedProxies twice trusts the union; with no cidrs it trusts
// nothing, and IP reads RemoteAddr only. Addresses and networks are compared
// after unmapping IPv4-mapped IPv6. TrustedProxies panics on an invalid CIDR.
// Combine it with ForwardedHeader to walk RFC 7239 Forwarded instead.
func TrustedProxies(cidrs ...string) IPOption {
	t := parseTrusted("TrustedProxies", cidrs)
	return func(c *ipConfig) {
		c.proxies = append(c.proxies, t...)
		c.useProxies = true
	}
}

// ForwardedHeader makes the TrustedProxies walk read the RFC 7239 Forwarded
// header (its for= parameters) instead of X-Forwarded-For; the two are never
// mixed, and a missing Forwarded never falls back to X-Forwarded-For.
// Besides the rules of TrustedProxies, a node reached by the walk that hides
// the client ("unknown", an obfuscated "_name", an element without for=)
// stops it with ErrUnidentifiedClient.
//
// IP panics if ForwardedHeader is given without TrustedProxies.
func ForwardedHeader() IPOption {
	return func(c *ipConfig) { c.forwarded = true }
}

// TrustedHeader makes IP read the client address from one header that the
// edge in front of the service sets and overwrites, such as
// "CF-Connecting-IP" (Cloudflare) or "X-Real-IP", but only when the peer
// (RemoteAddr) is inside cidrs; any other peer is keyed by RemoteAddr. From a
// trusted peer, the header must hold exactly one IP address (optionally with
// a port) on one line: missing or empty is ErrMissingHeader, several lines
// ErrRepeatedHeader, anything else ErrInvalidForwarding. No other header is
// ever consulted instead.
//
// TrustedHeader panics on an invalid CIDR or an empty name; IP panics if it
// is given twice or together with TrustedProxies.
func TrustedHeader(name string, cidrs ...string) IPOption {
	if name == "" {
		panic("keyfuncs: TrustedHeader: empty header name")
	}
	name = http.CanonicalHeaderKey(name)
	t := parseTrusted("TrustedHeader", cidrs)
	return func(c *ipConfig) {
		if c.useHeader {
			panic("keyfuncs: IP: TrustedHeader given more than once")
		}
		c.header, c.headerPeers, c.useHeader = name, t, true
	}
}

// IP returns a KeyFunc that keys a request by its client's IP address.
//
// Without options the client is RemoteAddr, and forwarding headers are
// ignored: that is right for a service that clients reach directly, and the
// only safe choice when nothing is known about the proxies in front. Behind
// proxies, TrustedProxies (X-Forwarded-For), TrustedProxies with
// ForwardedHeader (RFC 7239), or TrustedHeader (a header the edge
// overwrites) name the peers whose word is taken; exactly one of them.
//
// Addresses are normalised: ports and zones dropped, IPv4-mapped IPv6
// (::ffff:203.0.113.7) unmapped to IPv4 before anything else, then grouped
// into a network, /32 for IPv4 and /64 for IPv6 unless IPv4Prefix or
// IPv6Prefix say otherwise (a /64 does not hold a client that owns a /56 or
// a /48: see IPv6Prefix). The key is "ip:" followed by the address when the
// network is a single address, or by the network in CIDR notation otherwise:
//
//	ip:203.0.113.7            IPv4, default /32
//	ip:203.0.113.0/24         IPv4Prefix(24)
//	ip:2001:db8:1:2::/64      IPv6, default /64
//	ip:2001:db8::1            IPv6Prefix(128)
//
// A RemoteAddr that is not an IP address (a Unix socket) is ErrInvalidAddr.
// IP panics on a nil option or a conflicting combination (see the options).
// The KeyFunc is safe for concurrent use and allocates only the key.
func IP(opts ...IPOption) KeyFunc {
	c := &ipConfig{v4bits: 32, v6bits: 64}
	for _, o := range opts {
		if o == nil {
			panic("keyfuncs: IP: nil option")
		}
		o(c)
	}
	switch {
	case c.useHeader && c.useProxies:
		panic("keyfuncs: IP: TrustedHeader and TrustedProxies are exclusive: no fall-through from one header to another")
	case c.forwarded && !c.useProxies:
		panic("keyfuncs: IP: ForwardedHeader needs TrustedProxies")
	case c.useHeader:
		c.errMissing = &headerError{ErrMissingHeader, c.header}
		c.errRepeated = &headerError{ErrRepeatedHeader, c.header}
		c.errInvalid = &headerError{ErrInvalidForwarding, c.header}
		return c.fromHeader
	case c.forwarded:
		return c.fromForwarded
	case c.useProxies:
		return c.fromXFF
	}
	return c.fromRemote
}

func (c *ipConfig) fromRemote(r *http.Request) (string, error) {
	a, ok := c.peer(r)
	if !ok {
		return "", ErrInvalidAddr
	}
	return c.key(a), nil
}

func (c *ipConfig) fromHeader(r *http.Request) (string, error) {
	peer, ok := c.peer(r)
	if !ok {
		return "", ErrInvalidAddr
	}
	if !c.headerPeers.contains(peer) {
		return c.key(peer), nil
	}
	if len(r.Header[c.header]) == 0 {
		return c.unforwarded(peer, c.header), nil
	}
	v, err := single(r.Header, c.header, c.errMissing, c.errRepeated)
	if err != nil {
		return "", err
	}
	a, ok := parseAddr(v, false)
	if !ok {
		return "", c.errInvalid
	}
	return c.key(a), nil
}

// single returns the one value of header name, trimmed, or errMissing when
// it is absent or empty and errRepeated when it has several lines.
func single(h http.Header, name string, errMissing, errRepeated error) (string, error) {
	vs := h[name]
	switch {
	case len(vs) == 0:
		return "", errMissing
	case len(vs) > 1:
		return "", errRepeated
	}
	v := trimOWS(vs[0])
	if v == "" {
		return "", errMissing
	}
	return v, nil
}

// key formats the key of a normalised address. It builds the text in a
// stack buffer, so the returned string is the only allocation.
func (c *ipConfig) key(a netip.Addr) string {
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	bits := c.v4bits
	if a.Is6() {
		bits = c.v6bits
	}
	if bits == a.BitLen() {
		b = a.AppendTo(b)
	} else {
		p, _ := a.Prefix(bits) // bits was range-checked; a has no zone
		b = p.AppendTo(b)
	}
	return string(b)
}
