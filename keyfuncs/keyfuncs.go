package keyfuncs

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
)

// KeyFunc returns the rate-limiting key of a request: the subject whose
// bucket the request draws from. It returns either a non-empty key or an
// error, never an empty key with a nil error; the middleware hands errors to
// its error handler instead of limiting. The KeyFuncs of this package are
// safe for concurrent use.
type KeyFunc func(r *http.Request) (string, error)

// MaxValueLen is the longest client-controlled value, in bytes, that Header
// and the user keys accept; longer ones are ErrValueTooLong, so a client
// cannot make every request hash kilobytes.
const MaxValueLen = 1024

// maxPlainLen and maxJoinLen bound the user IDs and Join keys that are kept
// readable; longer ones are hashed so that keys stay short.
const (
	maxPlainLen = 64
	maxJoinLen  = 128
)

// First returns a KeyFunc that tries fns in order and returns the key of the
// first that succeeds (an empty key counts as failing). When all fail, the
// error joins theirs (errors.Join), so errors.Is finds each.
//
// First(Header("X-API-Key"), IP()) keys API clients by key and everyone else
// by address; a client that invents keys still gets a bucket per key (see
// Header). Do not chain IP KeyFuncs with different trust options this way:
// that is the fall-through between forwarding headers that IP refuses.
// First panics if fns is empty or holds nil.
func First(fns ...KeyFunc) KeyFunc {
	checkFns("First", fns)
	return func(r *http.Request) (string, error) {
		var errs []error
		for _, fn := range fns {
			k, err := fn(r)
			if err == nil && k != "" {
				return k, nil
			}
			if err == nil {
				err = ErrEmptyKey
			}
			errs = append(errs, err)
		}
		return "", errors.Join(errs...)
	}
}

// Join returns a KeyFunc whose key combines the keys of all fns, in order:
// one bucket per combination, such as a user at one address
// (Join(ContextUser(), IP())). Each bucket is narrower than either part's,
// so Join does not hold a client that can change one of the parts, such as
// an unauthenticated Header value (see Header). If any fn fails (or returns
// ""), Join returns that error.
//
// The key is "join:" followed by the parts separated by "|" when the parts
// are printable ASCII without "|", "{", "}" or spaces, and at most 128 bytes
// in all, such as "join:ip:203.0.113.7|user:alice". Otherwise it is "join#"
// followed by a hash of the length-prefixed parts. Either way two different
// combinations never make the same key: a part cannot forge the separator.
// Join panics if fns is empty or holds nil.
func Join(fns ...KeyFunc) KeyFunc {
	checkFns("Join", fns)
	return func(r *http.Request) (string, error) {
		var (
			arr   [4]string
			parts = arr[:0]
			plain = true
			size  = len("join:") + len(fns) - 1
		)
		for _, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", ErrEmptyKey
			}
			parts = append(parts, k)
			size += len(k)
			plain = plain && isPrintable(k, '|')
		}
		if plain && size <= maxJoinLen {
			var buf [maxJoinLen]byte
			b := append(buf[:0], "join:"...)
			for i, p := range parts {
				if i > 0 {
					b = append(b, '|')
				}
				b = append(b, p...)
			}
			return string(b), nil
		}
		var b []byte
		for _, p := range parts {
			b = strconv.AppendInt(b, int64(len(p)), 10)
			b = append(b, ':')
			b = append(b, p...)
		}
		return digest("join#", b), nil
	}
}

func checkFns(name string, fns []KeyFunc) {
	if len(fns) == 0 {
		panic("keyfuncs: " + name + ": no KeyFunc")
	}
	for _, fn := range fns {
		if fn == nil {
			panic("keyfuncs: " + name + ": nil KeyFunc")
		}
	}
}

// isPrintable reports whether s is printable ASCII without spaces, braces
// (Redis Cluster hash tags) or sep.
func isPrintable(s string, sep byte) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == sep {
			return false
		}
	}
	return true
}

// digest returns prefix followed by the unpadded base64url encoding of the
// first 16 bytes of SHA-256(data): 128 bits, far from any collision, in 22
// characters that are safe in a Redis key. The returned string is its only
// allocation when data does not escape.
func digest(prefix string, data []byte) string {
	sum := sha256.Sum256(data)
	var buf [16 + 22]byte
	b := append(buf[:0], prefix...)
	b = base64.RawURLEncoding.AppendEncode(b, sum[:16])
	return string(b)
}
