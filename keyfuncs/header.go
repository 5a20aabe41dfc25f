package keyfuncs

import "net/http"

// Header returns a KeyFunc that keys a request by the value of the header
// name, typically an API key ("X-API-Key").
//
// The value must be present on exactly one line, non-empty after trimming
// spaces and tabs (else ErrMissingHeader or ErrRepeatedHeader, wrapped with
// the header name) and at most MaxValueLen bytes (else ErrValueTooLong). It is
// hashed, never stored: the key is "hdr:" followed by the unpadded base64url
// encoding of the first 16 bytes of SHA-256(name, NUL, value), 26 characters
// in all, such as "hdr:XMa0Eajb6m7UnTeL27ktGw" for "X-API-Key: secret". So
// secrets never appear in Redis, and clients cannot put newlines, braces or
// kilobytes into a key. The canonical name is part of the hash, so the same
// value in two headers makes two keys.
//
// Header does not authenticate: any value gets its own bucket, so a client
// that sends a fresh value with each request is never limited. Put it after
// authentication, so that only issued keys reach it; where clients can
// invent values, also pass every request through a second limiter keyed by
// IP() with a coarser limit, in front of this one (two middlewares in a
// row). Combining the value with the address (First, Join) does not help:
// each new value is still a new key. It panics on an empty name.
func Header(name string) KeyFunc {
	if name == "" {
		panic("keyfuncs: Header: empty header name")
	}
	name = http.CanonicalHeaderKey(name)
	var (
		errMissing  error = &headerError{ErrMissingHeader, name}
		errRepeated error = &headerError{ErrRepeatedHeader, name}
		errTooLong  error = &headerError{ErrValueTooLong, name}
	)
	return func(r *http.Request) (string, error) {
		v, err := single(r.Header, name, errMissing, errRepeated)
		if err != nil {
			return "", err
		}
		if len(v) > MaxValueLen {
			return "", errTooLong
		}
		return hashed("hdr:", name, v), nil
	}
}

// hashed is digest(prefix, scope NUL value), built in a stack buffer: scope
// is a header name or a fixed label, so it fits unless a header name is
// absurdly long, and then the buffer moves to the heap.
func hashed(prefix, scope, value string) string {
	var buf [MaxValueLen + 128]byte
	b := append(buf[:0], scope...)
	b = append(b, 0)
	b = append(b, value...)
	return digest(prefix, b)
}
