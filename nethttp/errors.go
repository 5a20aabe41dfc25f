package nethttp

import (
	"errors"
	"fmt"

	"github.com/sluicehq/ratelimit/core"
)

// ErrKey is what an ErrorHandler receives, wrapped, when the KeyFunc failed:
// errors.Is(err, ErrKey). The KeyFunc's own error stays reachable through
// errors.Is and errors.As. A KeyFunc that returns "" without an error is the
// server's bug, not the client's: its error matches core.ErrEmptyKey, not
// ErrKey (500 by default, and logged).
var ErrKey = errors.New("nethttp: no rate-limit key")

// keyError wraps a KeyFunc's error so that it matches ErrKey.
type keyError struct{ err error }

func (e *keyError) Error() string        { return ErrKey.Error() + ": " + e.err.Error() }
func (e *keyError) Unwrap() error        { return e.err }
func (e *keyError) Is(target error) bool { return target == ErrKey }

// ErrRoute is what CheckRoutes returns, wrapped, when a WithRoutes pattern
// can never apply: it matches no route of the router, or is not written in
// the router's syntax.
var ErrRoute = errors.New("nethttp: a WithRoutes limit never applies")

// limitError is a WithLimitFunc function's error, or AllowLimit's for the
// limit it gave: the server's, never a key error.
type limitError struct{ err error }

func (e *limitError) Error() string { return "nethttp: WithLimitFunc: " + e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

// errEmptyKey is the error of a key function that returned "" without an
// error.
var errEmptyKey = fmt.Errorf("nethttp: the key function returned an empty key without an error: %w", core.ErrEmptyKey)
