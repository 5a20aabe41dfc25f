package keyfuncs

import (
	"errors"
	"strconv"
)

// Errors returned by the KeyFuncs of this package, possibly wrapped (with the
// header name, for instance); check them with errors.Is. None of them carries
// client-supplied text, so they are safe to log.
var (
	// ErrEmptyKey is returned when a key would be empty: an empty user ID, or
	// a KeyFunc passed to First or Join that returned "" without an error.
	// An empty key is never used, so requests never share one global bucket
	// by accident.
	ErrEmptyKey = errors.New("keyfuncs: empty key")

	// ErrMissingHeader is returned when a header that a KeyFunc needs is
	// absent or empty: the API key header of Header, the single header of
	// TrustedHeader, or X-Forwarded-For/Forwarded from a trusted proxy.
	ErrMissingHeader = errors.New("keyfuncs: missing header")

	// ErrRepeatedHeader is returned when a header that must hold exactly one
	// value was sent on more than one line (Header, TrustedHeader): which
	// line counts would be a guess.
	ErrRepeatedHeader = errors.New("keyfuncs: header sent more than once")

	// ErrValueTooLong is returned when a client-controlled value (a header
	// value, a user ID) is longer than MaxValueLen bytes.
	ErrValueTooLong = errors.New("keyfuncs: value too long")

	// ErrInvalidAddr is returned when RemoteAddr is not an IP address, with
	// or without a port (a Unix socket peer, for instance).
	ErrInvalidAddr = errors.New("keyfuncs: invalid remote address")

	// ErrInvalidForwarding is returned when a forwarding header from a
	// trusted proxy cannot be believed: an entry reached by the walk is not
	// an IP address, the Forwarded syntax is broken, or the walk passed more
	// than MaxHops trusted proxies. The walk stops there (fails closed)
	// rather than skipping to an entry further left, which a client could
	// have written.
	ErrInvalidForwarding = errors.New("keyfuncs: invalid forwarding header")

	// ErrUnidentifiedClient is returned when the Forwarded walk reaches a
	// node that does not disclose an address: "unknown", an obfuscated
	// identifier such as "_hidden", or an element without "for=".
	ErrUnidentifiedClient = errors.New("keyfuncs: client not identified")

	// ErrNoUser is returned by ContextValue and ContextUser when the request
	// context holds no string under the key.
	ErrNoUser = errors.New("keyfuncs: no user in request context")
)

// headerError wraps a sentinel with the (canonical) header name it concerns.
// KeyFuncs build theirs once, at construction, so returning one costs no
// allocation.
type headerError struct {
	err  error
	name string
}

func (e *headerError) Error() string { return e.err.Error() + " " + strconv.Quote(e.name) }
func (e *headerError) Unwrap() error { return e.err }

// Header returns the canonical name of the header e concerns, for a
// response naming what is missing (nethttp's 400); never a value.
func (e *headerError) Header() string { return e.name }
