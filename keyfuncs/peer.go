package keyfuncs

import "net/http"

// The functions below give calls that do not arrive as an *http.Request
// (package grpc's) the keys, rules and errors of IP, Header and User, by
// running the same code: a client keyed over gRPC and over HTTP gets one
// bucket when both limiters share a Name.

// PeerIP returns the key function of IP(opts...) for a call that is not an
// *http.Request: key(remoteAddr, lines) is the key, or the error, that
// IP(opts...) gives a request whose RemoteAddr is remoteAddr and whose
// header field named field holds lines. field is the one field opts make IP
// read, in canonical form: "X-Forwarded-For" with TrustedProxies,
// "Forwarded" with ForwardedHeader, TrustedHeader's name, or "" when IP
// reads RemoteAddr only (lines are then ignored). As IP, lines are believed
// only when remoteAddr is in a trusted network. PeerIP panics as IP does.
func PeerIP(opts ...IPOption) (key func(remoteAddr string, lines []string) (string, error), field string) {
	kf := IP(opts...)
	var c ipConfig
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.useHeader:
		field = c.header
	case c.forwarded:
		field = "Forwarded"
	case c.useProxies:
		field = "X-Forwarded-For"
	}
	return func(remoteAddr string, lines []string) (string, error) {
		r := &http.Request{RemoteAddr: remoteAddr}
		if field != "" && len(lines) > 0 {
			r.Header = http.Header{field: lines}
		}
		return kf(r)
	}, field
}

// HeaderLines returns the key function of Header(name) for a value that
// does not arrive in an http.Header, such as gRPC metadata: key(lines) is
// the key, or the error, that Header(name) gives a request whose field name
// holds lines. Field names are compared and hashed in canonical form, so
// the metadata "x-api-key" and the header "X-API-Key" give one key. It
// panics on an empty name.
func HeaderLines(name string) func(lines []string) (string, error) {
	kf := Header(name)
	name = http.CanonicalHeaderKey(name)
	return func(lines []string) (string, error) {
		r := &http.Request{}
		if len(lines) > 0 {
			r.Header = http.Header{name: lines}
		}
		return kf(r)
	}
}

// UserKey returns the key that User gives a request whose user ID is id:
// "user:" followed by id, or a hash for long or unusual IDs; an empty id is
// ErrEmptyKey and one longer than MaxValueLen ErrValueTooLong.
func UserKey(id string) (string, error) { return userKey(id) }
