package keyfuncs

import (
	"net/http"
	"net/netip"
	"strings"
)

var (
	errMissingXFF       error = &headerError{ErrMissingHeader, "X-Forwarded-For"}
	errMissingForwarded error = &headerError{ErrMissingHeader, "Forwarded"}
)

// fromXFF keys by the client that X-Forwarded-For names, when the peer is a
// trusted proxy; see TrustedProxies for the rules.
func (c *ipConfig) fromXFF(r *http.Request) (string, error) {
	peer, ok := c.peer(r)
	if !ok {
		return "", ErrInvalidAddr
	}
	if !c.proxies.contains(peer) {
		return c.key(peer), nil
	}
	if len(r.Header["X-Forwarded-For"]) == 0 {
		return c.unforwarded(peer, "X-Forwarded-For"), nil
	}
	a, err := walkXFF(r.Header["X-Forwarded-For"], c.proxies)
	if err != nil {
		return "", err
	}
	return c.key(a), nil
}

// walkXFF walks the X-Forwarded-For lines, taken in order as one list, from
// the right: the first address outside trusted is the client. If all are
// trusted it returns the leftmost. It never looks past an entry that is not
// an address: that entry may be all that stands between the walk and a
// forgery.
func walkXFF(lines []string, trusted trustSet) (netip.Addr, error) {
	if len(lines) == 0 {
		return netip.Addr{}, errMissingXFF
	}
	var last netip.Addr
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			j := strings.LastIndexByte(line, ',')
			a, ok := parseAddr(trimOWS(line[j+1:]), false)
			if !ok {
				return netip.Addr{}, ErrInvalidForwarding
			}
			if !trusted.contains(a) {
				return a, nil
			}
			if hops++; hops > MaxHops {
				return netip.Addr{}, ErrInvalidForwarding
			}
			last = a
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
	return last, nil
}
