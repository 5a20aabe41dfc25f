package keyfuncs

import (
	"context"
	"net/http"
)

// User returns a KeyFunc that keys a request by the user ID that id returns,
// for instance from a session or a verified token. An error from id is
// returned as is; an empty ID is ErrEmptyKey and one longer than MaxValueLen
// is ErrValueTooLong.
//
// IDs of at most 64 bytes made of ASCII letters, digits and "-._~@+=:/"
// (user names, e-mail addresses, UUIDs) give "user:" followed by the ID, such
// as "user:alice@example.com". Any other ID gives "user#" followed by the
// unpadded base64url encoding of the first 16 bytes of its SHA-256, so keys
// never hold control characters or braces. User panics if id is nil.
func User(id func(*http.Request) (string, error)) KeyFunc {
	if id == nil {
		panic("keyfuncs: User: nil func")
	}
	return func(r *http.Request) (string, error) {
		v, err := id(r)
		if err != nil {
			return "", err
		}
		return userKey(v)
	}
}

// ContextValue returns a KeyFunc that keys a request by the string stored in
// its context under key (context.WithValue), as a user ID formatted as by
// User. A missing value, or one that is not a string, is ErrNoUser.
// ContextValue panics if key is nil.
func ContextValue(key any) KeyFunc {
	if key == nil {
		panic("keyfuncs: ContextValue: nil key")
	}
	return func(r *http.Request) (string, error) {
		v, ok := r.Context().Value(key).(string)
		if !ok {
			return "", ErrNoUser
		}
		return userKey(v)
	}
}

type userContextKey struct{}

// WithUser returns a copy of ctx carrying the user ID id, for ContextUser
// and UserFromContext. An authentication middleware calls it, and the rate
// limiter placed after it keys by the user:
//
//	r = r.WithContext(keyfuncs.WithUser(r.Context(), claims.Subject))
func WithUser(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, userContextKey{}, id)
}

// UserFromContext returns the user ID stored by WithUser, and whether there
// was one.
func UserFromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(userContextKey{}).(string)
	return id, ok
}

// ContextUser returns a KeyFunc that keys a request by the user ID that
// WithUser stored in its context, formatted as by User; none is ErrNoUser.
func ContextUser() KeyFunc {
	return ContextValue(userContextKey{})
}

func userKey(id string) (string, error) {
	switch {
	case id == "":
		return "", ErrEmptyKey
	case len(id) > MaxValueLen:
		return "", ErrValueTooLong
	case len(id) <= maxPlainLen && isUserID(id):
		return "user:" + id, nil
	}
	return hashed("user#", "user", id), nil
}

func isUserID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			switch c {
			case '-', '.', '_', '~', '@', '+', '=', ':', '/':
			default:
				return false
			}
		}
	}
	return true
}
