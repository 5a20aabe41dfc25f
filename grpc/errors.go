package grpc

import (
	"errors"
	"fmt"

	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Errors an observer (WithObserver) and the log receive, possibly wrapped;
// check them with errors.Is.
var (
	// ErrKey is what the observer receives, wrapped, when the KeyFunc
	// failed or returned an empty key. The KeyFunc's own error stays
	// reachable through errors.Is and errors.As. It is nethttp.ErrKey, so
	// an observer written for the HTTP middleware counts key errors of
	// both alike.
	ErrKey = nethttp.ErrKey

	// ErrNoPeer is returned by PeerIP for a context without a peer
	// (peer.FromContext): a call the gRPC server did not make, such as an
	// interceptor called directly in a test.
	ErrNoPeer = errors.New("grpc: no peer in the call's context")
)

// errEmptyKey is the key error of a KeyFunc that returned "" without an
// error: the server's bug (codes.Internal). It matches keyfuncs.ErrEmptyKey.
var errEmptyKey = fmt.Errorf("grpc: KeyFunc returned an empty key without an error: %w", keyfuncs.ErrEmptyKey)

// keyError wraps a KeyFunc's error so that it matches ErrKey.
type keyError struct{ err error }

func (e *keyError) Error() string        { return "grpc: no rate-limit key: " + e.err.Error() }
func (e *keyError) Unwrap() error        { return e.err }
func (e *keyError) Is(target error) bool { return target == ErrKey }

// metadataError is a keyfuncs sentinel about a metadata field: it names the
// field as the client sends it (lower case), never its value.
type metadataError struct {
	err  error  // keyfuncs.ErrMissingHeader, ErrRepeatedHeader or ErrValueTooLong
	what string // "missing metadata", …
	name string // "x-api-key"
}

func (e *metadataError) Error() string { return "grpc: " + e.what + " " + `"` + e.name + `"` }
func (e *metadataError) Unwrap() error { return e.err }
