package keyfuncs

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRealIPRewriteLoggedOnce: chi's middleware.RealIP in front of the
// limiter rewrites RemoteAddr from X-Real-IP or X-Forwarded-For, without
// a port, so every client picks its own key (issue 23.7: 8 of 8 through a
// limit of 3): logged once, at error level, without the address. And a
// trusted proxy's own request without X-Forwarded-For (a health check) is
// keyed by the proxy, logged once. Not parallel: it replaces slog's
// default logger.
func TestRealIPRewriteLoggedOnce(t *testing.T) {
	var buf lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	ip := IP()
	for _, addr := range []string{"198.51.100.7", "198.51.100.8", "2001:db8::9"} {
		if k, err := ip(request(addr)); err != nil || !strings.HasPrefix(k, "ip:") {
			t.Fatalf("RemoteAddr %q: %q, %v", addr, k, err)
		}
	}
	if _, err := ip(request("198.51.100.7:1234")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "RemoteAddr has no port"); n != 1 || !strings.Contains(out, "level=ERROR") || strings.Contains(out, "198.51.100") {
		t.Errorf("logged %q: want one error line, without the address", out)
	}

	proxied := IP(TrustedProxies("10.0.0.0/8"))
	for range 3 {
		if k, err := proxied(request("10.0.0.1:1")); err != nil || k != "ip:10.0.0.1" {
			t.Fatalf("health check from the proxy: %q, %v; want the proxy's own key", k, err)
		}
	}
	if n := strings.Count(buf.String(), "without its forwarding header"); n != 1 {
		t.Errorf("logged %q: want one line about the unforwarded request", buf.String())
	}
}
