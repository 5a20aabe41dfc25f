package grpc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// addr is a net.Addr whose String is any text, as a transport reports it.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// callCtx is the context of a server call from remote with incoming
// metadata md.
func callCtx(remote string, md metadata.MD) context.Context {
	ctx := context.Background()
	if remote != "-" {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr(remote)})
	}
	return metadata.NewIncomingContext(ctx, md)
}

// sameOutcome reports a difference between two keys and errors.
func sameOutcome(k1 string, e1 error, k2 string, e2 error, sentinels ...error) string {
	if k1 != k2 || (e1 == nil) != (e2 == nil) {
		return "keys " + k1 + " / " + k2 + ", errors " + errString(e1) + " / " + errString(e2)
	}
	for _, s := range sentinels {
		if errors.Is(e1, s) != errors.Is(e2, s) {
			return "errors " + errString(e1) + " / " + errString(e2) + " differ on " + s.Error()
		}
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

var keyErrors = []error{
	keyfuncs.ErrEmptyKey, keyfuncs.ErrMissingHeader, keyfuncs.ErrRepeatedHeader, keyfuncs.ErrValueTooLong,
	keyfuncs.ErrInvalidAddr, keyfuncs.ErrInvalidForwarding, keyfuncs.ErrUnidentifiedClient, keyfuncs.ErrNoUser,
}

// PeerIP is keyfuncs.IP: for every trust option, peer and forwarding
// field, the same key or the same error, the metadata playing the header.
func TestPeerIPIsKeyfuncsIP(t *testing.T) {
	t.Parallel()
	options := map[string][]keyfuncs.IPOption{
		"none":      nil,
		"xff":       {keyfuncs.TrustedProxies("10.0.0.0/8", "fd00::/8")},
		"forwarded": {keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ForwardedHeader()},
		"header":    {keyfuncs.TrustedHeader("CF-Connecting-IP", "10.0.0.0/8")},
		"prefixes":  {keyfuncs.IPv4Prefix(24), keyfuncs.IPv6Prefix(48), keyfuncs.TrustedProxies("10.0.0.0/8")},
	}
	remotes := []string{"203.0.113.7:5000", "10.0.0.1:443", "[2001:db8:1:2::1]:80", "[::ffff:10.0.0.2]:1", "[fd00::1%eth0]:9", "/run/app.sock", "@", ""}
	lines := [][]string{
		nil, {""}, {"198.51.100.1"}, {"198.51.100.1, 10.0.0.3"}, {"198.51.100.1", "10.0.0.4"}, {"garbage, 10.0.0.3"},
		{"for=198.51.100.9;proto=https, for=10.0.0.3"}, {"for=unknown"}, {"[2001:db8::9]:443"}, {"a", "b"},
	}
	fields := []string{"X-Forwarded-For", "Forwarded", "Cf-Connecting-Ip"}
	for name, opts := range options {
		ip, rpc := keyfuncs.IP(opts...), ratelimit.PeerIP(opts...)
		for _, remote := range remotes {
			for _, ls := range lines {
				r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
				md := metadata.MD{}
				for _, f := range fields {
					if ls != nil {
						r.Header[f] = ls
						md[strings.ToLower(f)] = ls
					}
				}
				k1, e1 := ip(r)
				k2, e2 := rpc(callCtx(remote, md), "/a.B/C")
				if d := sameOutcome(k1, e1, k2, e2, keyErrors...); d != "" {
					t.Errorf("%s: peer %q, fields %q: %s", name, remote, ls, d)
				}
			}
		}
	}
	if _, err := ratelimit.PeerIP()(callCtx("-", nil), "/a.B/C"); !errors.Is(err, ratelimit.ErrNoPeer) {
		t.Errorf("no peer: %v, want ErrNoPeer", err)
	}
}

// Metadata is keyfuncs.Header, with errors that name the metadata field.
func TestMetadataIsKeyfuncsHeader(t *testing.T) {
	t.Parallel()
	hdr, rpc := keyfuncs.Header("X-API-Key"), ratelimit.Metadata("x-api-key")
	for _, vs := range [][]string{nil, {""}, {"  "}, {"secret"}, {" secret\t"}, {"a", "b"}, {strings.Repeat("k", keyfuncs.MaxValueLen)}, {strings.Repeat("k", keyfuncs.MaxValueLen+1)}} {
		r := &http.Request{Header: http.Header{}}
		md := metadata.MD{}
		if vs != nil {
			r.Header["X-Api-Key"], md["x-api-key"] = vs, vs
		}
		k1, e1 := hdr(r)
		k2, e2 := rpc(callCtx("-", md), "/a.B/C")
		if d := sameOutcome(k1, e1, k2, e2, keyErrors...); d != "" {
			t.Errorf("values %q: %s", vs, d)
		}
		if e2 != nil && !strings.Contains(e2.Error(), `metadata "x-api-key"`) && !strings.Contains(e2.Error(), `: "x-api-key"`) {
			t.Errorf("values %q: error %q does not name the metadata field", vs, e2)
		}
	}
}

// ContextUser and User are keyfuncs.ContextUser and keyfuncs.User.
func TestUserIsKeyfuncsUser(t *testing.T) {
	t.Parallel()
	ids := []string{"alice", "alice@example.com", "", "with space", "{brace}", strings.Repeat("u", 65), strings.Repeat("u", keyfuncs.MaxValueLen+1)}
	for _, id := range ids {
		ctx := keyfuncs.WithUser(context.Background(), id)
		k1, e1 := keyfuncs.ContextUser()((&http.Request{}).WithContext(ctx))
		k2, e2 := ratelimit.ContextUser()(ctx, "/a.B/C")
		if d := sameOutcome(k1, e1, k2, e2, keyErrors...); d != "" {
			t.Errorf("ContextUser %q: %s", id, d)
		}
		k3, e3 := ratelimit.User(func(context.Context) (string, error) { return id, nil })(ctx, "/a.B/C")
		if d := sameOutcome(k1, e1, k3, e3, keyErrors...); d != "" {
			t.Errorf("User %q: %s", id, d)
		}
	}
	if _, err := ratelimit.ContextUser()(context.Background(), "/a.B/C"); !errors.Is(err, keyfuncs.ErrNoUser) {
		t.Errorf("no user: %v, want keyfuncs.ErrNoUser", err)
	}
}

// The peer's forwarding metadata counts only from a trusted peer; the
// test's client is 127.0.0.1.
func TestPeerTrust(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		key        ratelimit.KeyFunc
		separate   bool       // two clients named by x-forwarded-for get a bucket each
		bad        codes.Code // x-forwarded-for "garbage"
		badMessage string
	}{
		{"default", nil, false, codes.OK, ""},
		{"untrusted peer", ratelimit.PeerIP(keyfuncs.TrustedProxies("10.0.0.0/8")), false, codes.OK, ""},
		{"trusted peer", ratelimit.PeerIP(keyfuncs.TrustedProxies("127.0.0.0/8")), true, codes.InvalidArgument,
			`missing or invalid rate-limit key: grpc: invalid forwarding metadata "x-forwarded-for"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []ratelimit.Option
			if tc.key != nil {
				opts = append(opts, ratelimit.WithKey(tc.key))
			}
			s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), opts...))
			wantCodes(t, func() call { return s.check(t, "x-forwarded-for", "198.51.100.1") }, codes.OK)
			second := codes.ResourceExhausted
			if tc.separate {
				second = codes.OK
			}
			wantCodes(t, func() call { return s.check(t, "x-forwarded-for", "198.51.100.2") }, second)
			want := tc.bad
			if want == codes.OK {
				want = codes.ResourceExhausted // the peer's bucket, empty
			}
			c := wantCodes(t, func() call { return s.check(t, "x-forwarded-for", "garbage") }, want)[0]
			if tc.badMessage != "" && c.st.Message() != tc.badMessage {
				t.Errorf("garbage: message %q, want %q", c.st.Message(), tc.badMessage)
			}
		})
	}
}

// Key errors: the client's are InvalidArgument with a message naming what
// is missing, never echoing what was sent; the server's are Internal; a
// KeyFunc's status reaches the client as it is.
func TestKeyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		key     ratelimit.KeyFunc
		md      []string
		code    codes.Code
		message string
	}{
		{"metadata missing", ratelimit.Metadata("X-API-Key"), nil, codes.InvalidArgument,
			`missing or invalid rate-limit key: grpc: missing metadata "x-api-key"`},
		{"metadata repeated", ratelimit.Metadata("x-api-key"), []string{"x-api-key", "a", "x-api-key", "b"}, codes.InvalidArgument,
			`missing or invalid rate-limit key: grpc: metadata sent more than once: "x-api-key"`},
		{"metadata present", ratelimit.Metadata("x-api-key"), []string{"x-api-key", "secret"}, codes.OK, ""},
		{"trusted header repeated", ratelimit.PeerIP(keyfuncs.TrustedHeader("X-Real-IP", "127.0.0.0/8")), []string{"x-real-ip", "192.0.2.1", "x-real-ip", "192.0.2.2"},
			codes.InvalidArgument, `missing or invalid rate-limit key: grpc: metadata sent more than once: "x-real-ip"`},
		{"no user", ratelimit.ContextUser(), nil, codes.InvalidArgument,
			"missing or invalid rate-limit key: keyfuncs: no user in request context"},
		{"client text", func(ctx context.Context, _ string) (string, error) {
			v := metadata.ValueFromIncomingContext(ctx, "tenant")
			return "", errors.New("unknown tenant " + strings.Join(v, ""))
		}, []string{"tenant", "<script>"}, codes.InvalidArgument, "missing or invalid rate-limit key"},
		{"status", func(context.Context, string) (string, error) {
			return "", status.Error(codes.Unauthenticated, "log in first")
		}, nil, codes.Unauthenticated, "log in first"},
		{"empty key", func(context.Context, string) (string, error) { return "", nil }, nil, codes.Internal,
			"rate limit could not be applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log logBuffer
			s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(5)), ratelimit.WithKey(tc.key), ratelimit.WithLogger(log.logger())))
			c := wantCodes(t, func() call { return s.check(t, tc.md...) }, tc.code)[0]
			if tc.code == codes.OK {
				if c.get(t, "ratelimit-remaining") != "4" {
					t.Errorf("remaining %q, want 4", c.get(t, "ratelimit-remaining"))
				}
				return
			}
			if c.st.Message() != tc.message {
				t.Errorf("message %q, want %q", c.st.Message(), tc.message)
			}
			if len(c.st.Details()) != 0 || len(c.md.Get("ratelimit-limit")) != 0 {
				t.Errorf("details %v, metadata %v; want none", c.st.Details(), c.md)
			}
			if !strings.Contains(log.String(), "kind=key") {
				t.Errorf("log %q; want a kind=key line", log.String())
			}
		})
	}
}

// A peer that is not an IP address (a Unix socket) is the server's setup:
// Internal.
func TestUnixSocketPeer(t *testing.T) {
	t.Parallel()
	in := ratelimit.UnaryServerInterceptor(limitertest.NewLimiter(t, core.PerMinute(5)), ratelimit.WithLogger(limitertest.Quiet))
	_, err := in(callCtx("@", nil), nil, &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}, func(context.Context, any) (any, error) {
		t.Error("handler ran")
		return nil, nil
	})
	if status.Code(err) != codes.Internal {
		t.Errorf("%v, want Internal", err)
	}
}

// Keys by API key, user and method: a bucket each.
func TestKeysSeparateBuckets(t *testing.T) {
	t.Parallel()
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if u := metadata.ValueFromIncomingContext(ctx, "user"); len(u) == 1 {
			ctx = keyfuncs.WithUser(ctx, u[0])
		}
		return h(ctx, req)
	}
	t.Run("metadata", func(t *testing.T) {
		s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.WithKey(ratelimit.Metadata("x-api-key"))))
		wantCodes(t, func() call { return s.check(t, "x-api-key", "k1") }, codes.OK, codes.ResourceExhausted)
		wantCodes(t, func() call { return s.check(t, "x-api-key", "k2") }, codes.OK, codes.ResourceExhausted)
	})
	t.Run("user", func(t *testing.T) {
		s := serve(t, grpc.ChainUnaryInterceptor(auth,
			ratelimit.UnaryServerInterceptor(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.WithKey(ratelimit.ContextUser()))))
		wantCodes(t, func() call { return s.check(t, "user", "alice") }, codes.OK, codes.ResourceExhausted)
		wantCodes(t, func() call { return s.check(t, "user", "bob") }, codes.OK, codes.ResourceExhausted)
	})
	t.Run("method", func(t *testing.T) {
		s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.WithKey(ratelimit.Method())))
		wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)
		wantCodes(t, func() call { return s.list(t) }, codes.OK, codes.ResourceExhausted)
	})
}

// An API key limited over HTTP and over gRPC by one limiter draws from one
// bucket: the keys are the same.
func TestSharedBucketWithHTTP(t *testing.T) {
	t.Parallel()
	lim := limitertest.NewLimiter(t, core.PerMinute(3))
	h := nethttp.Middleware(lim, nethttp.WithKey(keyfuncs.Header("X-API-Key")))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "shared")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP: %d", w.Code)
		}
	}
	s := serveBoth(t, both(lim, ratelimit.WithKey(ratelimit.Metadata("x-api-key"))))
	calls := wantCodes(t, func() call { return s.check(t, "x-api-key", "shared") }, codes.OK, codes.ResourceExhausted)
	if got := calls[0].get(t, "ratelimit-remaining"); got != "0" {
		t.Errorf("gRPC after 2 HTTP requests: remaining %q, want 0", got)
	}
}
