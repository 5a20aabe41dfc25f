package keyfuncs

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func withContext(key, value any) *http.Request {
	r := request("203.0.113.7:1")
	return r.WithContext(context.WithValue(r.Context(), key, value))
}

func TestUser(t *testing.T) {
	t.Parallel()
	errAuth := errors.New("not signed in")
	fn := User(func(r *http.Request) (string, error) {
		id := r.Header.Get("X-Test-User")
		if id == "fail" {
			return "", errAuth
		}
		return id, nil
	})
	long := strings.Repeat("u", maxPlainLen+1)
	runKeys(t, fn, []keyCase{
		{"plain id", request("1.2.3.4:1", "X-Test-User", "alice"), "user:alice", nil},
		{"e-mail", request("1.2.3.4:1", "X-Test-User", "alice+rl@example.com"), "user:alice+rl@example.com", nil},
		{"uuid", request("1.2.3.4:1", "X-Test-User", "0b6e0c4e-3f4e-4b8e-9d2c-9a1f3e9f1c2a"), "user:0b6e0c4e-3f4e-4b8e-9d2c-9a1f3e9f1c2a", nil},
		{"braces are hashed", request("1.2.3.4:1", "X-Test-User", "{slot}"), hashed("user#", "user", "{slot}"), nil},
		{"spaces are hashed", request("1.2.3.4:1", "X-Test-User", "Alice Smith"), hashed("user#", "user", "Alice Smith"), nil},
		{"non-ASCII is hashed", request("1.2.3.4:1", "X-Test-User", "zoë"), hashed("user#", "user", "zoë"), nil},
		{"long id is hashed", request("1.2.3.4:1", "X-Test-User", long), hashed("user#", "user", long), nil},
		{"empty id", request("1.2.3.4:1"), "", ErrEmptyKey},
		{"too long", request("1.2.3.4:1", "X-Test-User", strings.Repeat("u", MaxValueLen+1)), "", ErrValueTooLong},
		{"error passed through", request("1.2.3.4:1", "X-Test-User", "fail"), "", errAuth},
	})
	t.Run("hashed form cannot be forged by a plain id", func(t *testing.T) {
		h, _ := userKey("{slot}")
		forged, err := userKey(strings.TrimPrefix(h, "user#"))
		if err != nil || forged == h {
			t.Errorf("got %q, %v; want a key other than %q", forged, err, h)
		}
	})
}

func TestContextUser(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	runKeys(t, ContextValue(ctxKey{}), []keyCase{
		{"string value", withContext(ctxKey{}, "alice"), "user:alice", nil},
		{"missing", request("1.2.3.4:1"), "", ErrNoUser},
		{"not a string", withContext(ctxKey{}, 42), "", ErrNoUser},
		{"empty", withContext(ctxKey{}, ""), "", ErrEmptyKey},
		{"another key's value is not read", withContext("ctxKey", "alice"), "", ErrNoUser},
	})
	r := request("1.2.3.4:1")
	runKeys(t, ContextUser(), []keyCase{
		{"WithUser", r.WithContext(WithUser(r.Context(), "bob")), "user:bob", nil},
		{"no WithUser", r, "", ErrNoUser},
	})
	t.Run("UserFromContext", func(t *testing.T) {
		got, ok := UserFromContext(WithUser(context.Background(), "bob"))
		if got != "bob" || !ok {
			t.Errorf("got %q, %v; want %q, true", got, ok, "bob")
		}
		if got, ok := UserFromContext(context.Background()); got != "" || ok {
			t.Errorf("got %q, %v; want \"\", false", got, ok)
		}
	})
}

func TestFirst(t *testing.T) {
	t.Parallel()
	empty := KeyFunc(func(*http.Request) (string, error) { return "", nil })
	runKeys(t, First(Header("X-API-Key"), IP()), []keyCase{
		{"first succeeds", request("1.2.3.4:1", "X-API-Key", "secret"), hashed("hdr:", "X-Api-Key", "secret"), nil},
		{"falls back", request("1.2.3.4:1"), "ip:1.2.3.4", nil},
		{"all fail: both errors", request("unix"), "", ErrMissingHeader},
		{"all fail: both errors, the second too", request("unix"), "", ErrInvalidAddr},
	})
	runKeys(t, First(empty, IP()), []keyCase{
		{"empty key counts as failure", request("1.2.3.4:1"), "ip:1.2.3.4", nil},
	})
	runKeys(t, First(empty), []keyCase{
		{"only empty keys is ErrEmptyKey", request("1.2.3.4:1"), "", ErrEmptyKey},
	})
}

func TestJoin(t *testing.T) {
	t.Parallel()
	fixed := func(k string) KeyFunc { return func(*http.Request) (string, error) { return k, nil } }
	hdr := hashed("hdr:", "X-Api-Key", "secret")
	runKeys(t, Join(IP(), Header("X-API-Key")), []keyCase{
		{"readable", request("1.2.3.4:1", "X-API-Key", "secret"), "join:ip:1.2.3.4|" + hdr, nil},
		{"any failure fails", request("1.2.3.4:1"), "", ErrMissingHeader},
	})
	runKeys(t, Join(IP(), fixed("")), []keyCase{
		{"empty part", request("1.2.3.4:1"), "", ErrEmptyKey},
	})
	runKeys(t, Join(fixed("a|b"), fixed("c")), []keyCase{
		{"separator in a part is hashed", request("1.2.3.4:1"), digest("join#", []byte("3:a|b1:c")), nil},
	})
	runKeys(t, Join(fixed(strings.Repeat("a", 100)), fixed(strings.Repeat("b", 100))), []keyCase{
		{"long parts are hashed", request("1.2.3.4:1"), digest("join#", []byte("100:"+strings.Repeat("a", 100)+"100:"+strings.Repeat("b", 100))), nil},
	})
	t.Run("parts cannot forge another combination", func(t *testing.T) {
		for _, pair := range [][2]KeyFunc{
			{Join(fixed("a|b"), fixed("c")), Join(fixed("a"), fixed("b|c"))},
			{Join(fixed("ab"), fixed("c")), Join(fixed("a"), fixed("bc"))},
			{Join(fixed("1:a1:b"), fixed("x{")), Join(fixed("1:a"), fixed("1:bx{"))},
			{Join(fixed("a"), fixed("b")), Join(fixed("a|b"))},
		} {
			ka, _ := pair[0](request("1.2.3.4:1"))
			kb, _ := pair[1](request("1.2.3.4:1"))
			if ka == kb {
				t.Errorf("got the same key %q for two combinations", ka)
			}
		}
	})
}
