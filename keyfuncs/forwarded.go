package keyfuncs

import (
	"net/http"
	"net/netip"
	"strings"
)

// fromForwarded keys by the client that the RFC 7239 Forwarded header
// names, when the peer is a trusted proxy; see TrustedProxies and
// ForwardedHeader for the rules.
func (c *ipConfig) fromForwarded(r *http.Request) (string, error) {
	peer, ok := c.peer(r)
	if !ok {
		return "", ErrInvalidAddr
	}
	if !c.proxies.contains(peer) {
		return c.key(peer), nil
	}
	if len(r.Header["Forwarded"]) == 0 {
		return c.unforwarded(peer, "Forwarded"), nil
	}
	a, err := walkForwarded(r.Header["Forwarded"], c.proxies)
	if err != nil {
		return "", err
	}
	return c.key(a), nil
}

// walkForwarded is walkXFF for the for= nodes of RFC 7239 Forwarded lines.
//
// A quoted-string may hold commas, so a line cannot be split from the right;
// it is split from the left (forwardedElements), keeping the last elements in
// a ring on the stack, and a line whose quotes do not balance is rejected
// whole: past an unbalanced quote the element boundaries are unknown.
func walkForwarded(lines []string, trusted trustSet) (netip.Addr, error) {
	if len(lines) == 0 {
		return netip.Addr{}, errMissingForwarded
	}
	var (
		last netip.Addr
		hops int
		ring [MaxHops + 1]string
	)
	for i := len(lines) - 1; i >= 0; i-- {
		n, ok := forwardedElements(lines[i], &ring)
		if !ok {
			return netip.Addr{}, ErrInvalidForwarding
		}
		for k := n - 1; k >= 0; k-- {
			if n-k > len(ring) {
				return netip.Addr{}, ErrInvalidForwarding // more than MaxHops in one line
			}
			a, err := forwardedFor(ring[k%len(ring)])
			if err != nil {
				return netip.Addr{}, err
			}
			if !trusted.contains(a) {
				return a, nil
			}
			if hops++; hops > MaxHops {
				return netip.Addr{}, ErrInvalidForwarding
			}
			last = a
		}
	}
	return last, nil
}

// forwardedElements splits a Forwarded line at the commas outside quoted
// strings, storing element k in ring[k%len(ring)], and returns the number of
// elements. It reports false for an unbalanced quote, a dangling escape or a
// control character other than HTAB.
func forwardedElements(line string, ring *[MaxHops + 1]string) (int, bool) {
	n, start, quoted := 0, 0, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c < ' ' && c != '\t' || c == 0x7f:
			return 0, false
		case quoted && c == '\\':
			if i++; i == len(line) {
				return 0, false
			}
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			ring[n%len(ring)] = line[start:i]
			n++
			start = i + 1
		}
	}
	if quoted {
		return 0, false
	}
	ring[n%len(ring)] = line[start:]
	return n + 1, true
}

// forwardedFor returns the address in the for= parameter of one
// forwarded-element: forwarded-pair *( ";" forwarded-pair ), each pair
// token "=" ( token / quoted-string ).
func forwardedFor(elem string) (netip.Addr, error) {
	var node string
	found := false
	for elem != "" {
		pair := elem
		if i := indexUnquoted(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			elem = ""
		}
		pair = trimOWS(pair)
		if pair == "" {
			continue // empty pairs are allowed by the grammar
		}
		eq := strings.IndexByte(pair, '=')
		if eq <= 0 || !isToken(pair[:eq]) {
			return netip.Addr{}, ErrInvalidForwarding
		}
		v, ok := pairValue(pair[eq+1:])
		if !ok {
			return netip.Addr{}, ErrInvalidForwarding
		}
		if strings.EqualFold(pair[:eq], "for") {
			if found {
				return netip.Addr{}, ErrInvalidForwarding // RFC 7239 §4: at most once
			}
			node, found = v, true
		}
	}
	if !found {
		return netip.Addr{}, ErrUnidentifiedClient
	}
	return forwardedNode(node)
}

// forwardedNode parses a node (RFC 7239 §6): an IPv4 address, a bracketed
// IPv6 address, "unknown" or an obfuscated "_name", each with an optional
// port. A bare IPv6 address, which some proxies send, is accepted too.
func forwardedNode(node string) (netip.Addr, error) {
	name := node
	if i := strings.IndexByte(node, ':'); i >= 0 && node[0] != '[' {
		name = node[:i]
	}
	switch {
	case strings.EqualFold(name, "unknown"):
		return netip.Addr{}, ErrUnidentifiedClient
	case name != "" && name[0] == '_':
		if !validObf(name[1:]) || (len(name) < len(node) && !validPort(node[len(name)+1:], true)) {
			return netip.Addr{}, ErrInvalidForwarding
		}
		return netip.Addr{}, ErrUnidentifiedClient
	}
	a, ok := parseAddr(node, true)
	if !ok {
		return netip.Addr{}, ErrInvalidForwarding
	}
	return a, nil
}

// pairValue returns the value of a forwarded-pair: a quoted-string without
// its quotes, or the bare text. Quoted values holding an escape are refused
// rather than unescaped, since no valid node needs one; bare values are
// accepted beyond token characters ("for=[::1]:80", common in the wild), as
// the splitting on commas, semicolons and quotes is already settled.
func pairValue(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	quoted := v[0] == '"'
	if quoted {
		if len(v) < 2 || v[len(v)-1] != '"' {
			return "", false
		}
		v = v[1 : len(v)-1]
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"', '\\':
			return "", false
		case ' ', '\t':
			if !quoted {
				return "", false
			}
		}
	}
	return v, true
}

// indexUnquoted is strings.IndexByte outside quoted strings. The quotes of
// s are known to balance (forwardedElements checked them).
func indexUnquoted(s string, sep byte) int {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return i
		}
	}
	return -1
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
