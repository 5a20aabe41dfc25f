package keyfuncs

import (
	"strings"
	"testing"
)

func TestHeader(t *testing.T) {
	t.Parallel()
	fn := Header("x-api-key")
	secret, _ := fn(request("1.2.3.4:1", "X-API-Key", "secret"))
	runKeys(t, fn, []keyCase{
		{"hashed", request("1.2.3.4:1", "X-API-Key", "secret"), secret, nil},
		{"spaces around the value are trimmed", request("1.2.3.4:1", "X-API-Key", " secret\t"), secret, nil},
		{"independent of the address", request("[2001:db8::1]:1", "X-API-Key", "secret"), secret, nil},
		{"absent", request("1.2.3.4:1"), "", ErrMissingHeader},
		{"empty", request("1.2.3.4:1", "X-API-Key", ""), "", ErrMissingHeader},
		{"blank", request("1.2.3.4:1", "X-API-Key", "  "), "", ErrMissingHeader},
		{"repeated: which line counts would be a guess", request("1.2.3.4:1", "X-API-Key", "a", "X-API-Key", "b"), "", ErrRepeatedHeader},
		{"longer than MaxValueLen", request("1.2.3.4:1", "X-API-Key", strings.Repeat("k", MaxValueLen+1)), "", ErrValueTooLong},
		{"64 KiB", request("1.2.3.4:1", "X-API-Key", strings.Repeat("k", 64<<10)), "", ErrValueTooLong},
	})

	t.Run("format", func(t *testing.T) {
		if !strings.HasPrefix(secret, "hdr:") || len(secret) != 26 || !isPrintable(secret, '|') {
			t.Errorf("got %q; want hdr: and 22 base64url characters", secret)
		}
		if strings.Contains(secret, "secret") {
			t.Errorf("got %q; the raw value must not appear", secret)
		}
	})
	t.Run("stable", func(t *testing.T) {
		// The hash is part of the key format: changing it moves every bucket.
		// printf 'X-Api-Key\0secret' | sha256sum, first 16 bytes, base64url.
		const want = "hdr:XMa0Eajb6m7UnTeL27ktGw"
		if secret != want {
			t.Errorf("got %q; want %q", secret, want)
		}
	})
	for _, tc := range []struct {
		name string
		a, b KeyFunc
		ra   []string
		rb   []string
	}{
		{"different values", fn, fn, []string{"X-API-Key", "a"}, []string{"X-API-Key", "b"}},
		{"same value in another header", fn, Header("X-Tenant"), []string{"X-API-Key", "a"}, []string{"X-Tenant", "a"}},
		{"value with a NUL cannot forge the name separator", Header("X-A"), Header("X-A"), []string{"X-A", "b\x00c"}, []string{"X-A", "b"}},
		{"longest value differs from its prefix", fn, fn, []string{"X-API-Key", strings.Repeat("k", MaxValueLen)}, []string{"X-API-Key", strings.Repeat("k", MaxValueLen-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ka, erra := tc.a(request("1.2.3.4:1", tc.ra...))
			kb, errb := tc.b(request("1.2.3.4:1", tc.rb...))
			if erra != nil || errb != nil || ka == kb {
				t.Errorf("got %q, %v and %q, %v; want two different keys", ka, erra, kb, errb)
			}
		})
	}
	t.Run("error names the header", func(t *testing.T) {
		_, err := fn(request("1.2.3.4:1"))
		if got, want := err.Error(), `keyfuncs: missing header "X-Api-Key"`; got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	})
}

func BenchmarkKeys(b *testing.B) {
	r := request("203.0.113.7:1234", "X-API-Key", "0123456789abcdef0123456789abcdef")
	r = r.WithContext(WithUser(r.Context(), "alice@example.com"))
	for _, bc := range []struct {
		name string
		fn   KeyFunc
	}{
		{"Header", Header("X-API-Key")},
		{"ContextUser", ContextUser()},
		{"Join/user+IP", Join(ContextUser(), IP())},
		{"First/Header,IP", First(Header("X-API-Key"), IP())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
