package nethttp

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKeyErrorsAreLoggedOnce: a misconfiguration that fails every request's
// key is reported, once per interval, without the client's input.
func TestKeyErrorsAreLoggedOnce(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(10), FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(l, WithKey(keyfuncs.Header("X-API-Key")), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for i := 0; i < 100; i++ {
		r := httptest.NewRequest("GET", "/?secret=attacker-text", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", w.Code)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "could not be rate limited"); n != 1 {
		t.Fatalf("%d log lines for 100 key errors, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "kind=key") || strings.Contains(out, "attacker-text") {
		t.Errorf("log line %q: want kind=key and no client input", out)
	}
}

// TestLoggerNeverLogsClientText: WithLogger's promise holds for a key
// function and a WithLimitFunc function of the user's whose error text
// quotes the request (issue 36 item 12: it was logged as it was).
func TestLoggerNeverLogsClientText(t *testing.T) {
	t.Parallel()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(10), FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for name, opt := range map[string]Option{
		"key": WithKey(func(r *http.Request) (string, error) {
			return "", fmt.Errorf("no account for token %q", r.Header.Get("X-Token"))
		}),
		"limit": WithLimitFunc(func(r *http.Request) (core.Limit, error) {
			return core.Limit{}, fmt.Errorf("no plan for token %q", r.Header.Get("X-Token"))
		}),
	} {
		var buf syncBuffer
		h := Middleware(l, opt, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))(ok)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Token", "attacker-text")
		h.ServeHTTP(httptest.NewRecorder(), r)
		out := buf.String()
		if !strings.Contains(out, "could not be rate limited") || strings.Contains(out, "attacker-text") {
			t.Errorf("%s: logged %q: want the line, without the client's text", name, out)
		}
	}
}

// TestRealIPReportGoesToLogger: the default key's report of a RemoteAddr
// rewritten from request headers (no port) goes to WithLogger, in the
// rate-limit and the in-flight middleware, not to slog.Default (issue 36
// item 11).
func TestRealIPReportGoesToLogger(t *testing.T) {
	t.Parallel()
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(10), FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "realip", Max: 1, FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for name, mw := range map[string]func(Option) func(http.Handler) http.Handler{
		"Middleware":  func(o Option) func(http.Handler) http.Handler { return Middleware(l, o) },
		"Concurrency": func(o Option) func(http.Handler) http.Handler { return Concurrency(c, o) },
	} {
		var buf syncBuffer
		h := mw(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))(ok)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100.7" // as chi's middleware.RealIP writes it
		h.ServeHTTP(httptest.NewRecorder(), r)
		if out := buf.String(); !strings.Contains(out, "RemoteAddr has no port") {
			t.Errorf("%s: WithLogger got %q, want the RealIP report", name, out)
		}
	}
}

// TestServeKeyReportsWithKey: ServeKey ignores a WithKey given to its
// Gate, and says so once, at error level, rather than silently (issue 36
// item 12: the Gate's comment said every option applies to both entry
// points).
func TestServeKeyReportsWithKey(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(10), FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(l, WithKey(keyfuncs.Header("X-API-Key")), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for range 3 {
		w := httptest.NewRecorder()
		g.ServeKey(w, httptest.NewRequest("GET", "/", nil), "user:alice", ok)
		if w.Code != http.StatusOK {
			t.Fatalf("ServeKey: %d, want 200 (keyed by its key, not the missing header)", w.Code)
		}
	}
	if out := buf.String(); strings.Count(out, "ServeKey ignores the Gate's WithKey") != 1 || !strings.Contains(out, "level=ERROR") {
		t.Errorf("logged %q: want one error line", out)
	}
}
