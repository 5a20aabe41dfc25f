package grpc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/ratelimit/keyfuncs"
)

// KeyFunc returns the rate-limiting key of a call to fullMethod
// ("/pkg.Service/Method"), from its context: the peer, the incoming
// metadata, values an authentication interceptor stored. It returns a
// non-empty key or an error, never "" with a nil error (the interceptor
// answers that with codes.Internal, as the server's bug).
//
// An error is the client's: the call gets codes.InvalidArgument, unless
// the error carries a gRPC status (status.Error), which the client then
// gets as it is, or is keyfuncs.ErrInvalidAddr or ErrNoPeer, which are
// the server's (codes.Internal). The KeyFuncs of this package return keys
// in the formats of package keyfuncs, so a client limited over HTTP and
// over gRPC by limiters with the same Name draws from one bucket.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// PeerIP returns a KeyFunc that keys a call by its client's IP address,
// with the rules, options, keys and errors of keyfuncs.IP (the same code):
// the peer address (peer.FromContext) plays RemoteAddr, and the incoming
// metadata plays the header fields, so x-forwarded-for (or forwarded, or
// TrustedHeader's field) counts only with a trust option and only from a
// peer inside its networks:
//
//	PeerIP()                                         // the peer address: clients connect directly
//	PeerIP(keyfuncs.TrustedProxies("10.0.0.0/8"))    // behind your proxies (Envoy) appending to x-forwarded-for
//
// It is the interceptors' default key. A peer that is not an IP address
// (a Unix socket) is keyfuncs.ErrInvalidAddr, the server's setup: the call
// gets codes.Internal. PeerIP panics as keyfuncs.IP does.
func PeerIP(opts ...keyfuncs.IPOption) KeyFunc {
	key, field := keyfuncs.PeerIP(opts...)
	field = strings.ToLower(field) // metadata names are lower case
	errs := metadataErrors(field,
		metadataError{err: keyfuncs.ErrInvalidForwarding, what: "invalid forwarding metadata"})
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", ErrNoPeer
		}
		var lines []string
		if field != "" {
			lines = metadata.ValueFromIncomingContext(ctx, field)
		}
		k, err := key(p.Addr.String(), lines)
		if err != nil {
			return "", errs.named(err)
		}
		return k, nil
	}
}

// Metadata returns a KeyFunc that keys a call by the value of the incoming
// metadata field name, typically an API key ("x-api-key"), with the rules
// and key of keyfuncs.Header: exactly one value, non-empty after trimming,
// at most keyfuncs.MaxValueLen bytes, hashed (never stored). The errors
// match keyfuncs.ErrMissingHeader, ErrRepeatedHeader and ErrValueTooLong,
// and name the field, never its value. The metadata "x-api-key" and the
// HTTP header "X-API-Key" give the same key.
//
// As keyfuncs.Header, it does not authenticate: put it after the
// interceptor that checks the key, or clients that invent keys get a
// bucket each. It panics on an empty name.
func Metadata(name string) KeyFunc {
	if name == "" {
		panic("grpc: Metadata: empty name")
	}
	name = strings.ToLower(name)
	key := keyfuncs.HeaderLines(name)
	errs := metadataErrors(name)
	return func(ctx context.Context, _ string) (string, error) {
		k, err := key(metadata.ValueFromIncomingContext(ctx, name))
		if err != nil {
			return "", errs.named(err)
		}
		return k, nil
	}
}

// namedErrors are the errors about one metadata field, built once.
type namedErrors []*metadataError

// metadataErrors returns the errors about the field name: a missing,
// repeated or too long value, and extra.
func metadataErrors(name string, extra ...metadataError) namedErrors {
	errs := namedErrors{
		{keyfuncs.ErrMissingHeader, "missing metadata", name},
		{keyfuncs.ErrRepeatedHeader, "metadata sent more than once:", name},
		{keyfuncs.ErrValueTooLong, "metadata value too long:", name},
	}
	for _, e := range extra {
		e.name = name
		errs = append(errs, &e)
	}
	return errs
}

// named returns the error of errs that err matches, which names the
// metadata field rather than keyfuncs' header, or err when none does.
func (errs namedErrors) named(err error) error {
	for _, e := range errs {
		if errors.Is(err, e.err) {
			return e
		}
	}
	return err
}

// User returns a KeyFunc that keys a call by the user ID that id returns,
// for instance from claims an authentication interceptor stored in the
// context, or from the client certificate (peer.FromContext's AuthInfo).
// The key is keyfuncs.User's: "user:" followed by the ID, or a hash of a
// long or unusual ID. An error from id is returned as is; an empty ID is
// keyfuncs.ErrEmptyKey. User panics if id is nil.
func User(id func(ctx context.Context) (string, error)) KeyFunc {
	if id == nil {
		panic("grpc: User: nil func")
	}
	return func(ctx context.Context, _ string) (string, error) {
		v, err := id(ctx)
		if err != nil {
			return "", err
		}
		return keyfuncs.UserKey(v)
	}
}

// ContextUser returns a KeyFunc that keys a call by the user ID that an
// authentication interceptor stored with keyfuncs.WithUser, formatted as by
// User; none is keyfuncs.ErrNoUser (codes.InvalidArgument). Put the rate
// limiter after authentication, so that an unauthenticated call is refused
// there first.
func ContextUser() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		id, ok := keyfuncs.UserFromContext(ctx)
		if !ok {
			return "", keyfuncs.ErrNoUser
		}
		return keyfuncs.UserKey(id)
	}
}

// Method returns a KeyFunc that keys a call by its full method name,
// "method:/pkg.Service/Method": one bucket per method shared by every
// client, a cap on the method's total rate.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) {
		return "method:" + fullMethod, nil
	}
}
