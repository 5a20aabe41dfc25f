// Package keyfuncs turns an HTTP request into a rate-limiting key.
package keyfuncs

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
)

// KeyFunc returns the rate-limiting key of a request: the subject whose
// bucket the request draws from. A KeyFunc returns either a non-empty key
// or an error, never an empty key with a nil error. KeyFuncs built by this
// package are safe for concurrent use.
type KeyFunc func(r *http.Request) (string, error)

var (
	// ErrEmptyKey is returned when a key would be empty.
	ErrEmptyKey = errors.New("keyfuncs: empty key")
	// ErrMissingHeader is returned when a required header is absent or empty.
	ErrMissingHeader = errors.New("keyfuncs: missing header")
	// ErrInvalidAddr is returned when RemoteAddr is not an IP address.
	ErrInvalidAddr = errors.New("keyfuncs: invalid address")
)

// IPOption configures IP.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted []netip.Prefix
}

// TrustedProxies lists the proxies whose X-Forwarded-For is believed.
// It panics on an invalid CIDR.
func TrustedProxies(cidrs ...string) IPOption {
	ps := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			panic("keyfuncs: TrustedProxies: invalid CIDR " + c)
		}
		ps = append(ps, p.Masked())
	}
	return func(c *ipConfig) { c.trusted = append(c.trusted, ps...) }
}

// IP keys a request by the client IP address taken from RemoteAddr.
func IP(opts ...IPOption) KeyFunc {
	var cfg ipConfig
	for _, o := range opts {
		o(&cfg)
	}
	return func(r *http.Request) (string, error) {
		a, err := netip.ParseAddrPort(r.RemoteAddr)
		var addr netip.Addr
		if err == nil {
			addr = a.Addr()
		} else if addr, err = netip.ParseAddr(r.RemoteAddr); err != nil {
			return "", ErrInvalidAddr
		}
		addr = addr.WithZone("").Unmap()
		if addr.Is4() {
			return "ip:" + addr.String(), nil
		}
		p, _ := addr.Prefix(64)
		return "ip:" + p.String(), nil
	}
}

// Header keys a request by the value of the named header, hashed.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", ErrMissingHeader
		}
		sum := sha256.Sum256([]byte(name + "\x00" + v))
		return "hdr:" + base64.RawURLEncoding.EncodeToString(sum[:16]), nil
	}
}
