package soak_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Hostile input through the middleware: whatever a client puts in the
// headers and addresses a key is made of, nothing panics, the response is
// one of the documented ones, no byte the client chose comes back in a
// response, and no raw client text reaches a store key.

// marker is in every hostile value, so an echo anywhere is easy to find.
const marker = "ZQXJ"

var hostileValues = []string{
	marker + "<script>alert(1)</script>",
	marker + `"},{"status":200,"detail":"`,
	marker + "{evil}:other-policy",
	"}" + marker + "{",
	marker + "\x00\x01\x1b[31m\x7f",
	marker + "\r\nSet-Cookie: session=stolen",
	"\xff\xfe" + marker + "\xc3\x28\xed\xa0\x80",
	strings.Repeat(marker, 16<<10),            // 64 KiB
	strings.Repeat(marker+"\xff", 200<<10),    // 1 MiB, not UTF-8
	"203.0.113.7, " + marker,                  // an address list with garbage
	marker + ", 203.0.113.7",                  // garbage on the left
	"for=" + marker + `;proto="` + marker,     // broken Forwarded
	"for=\"[2001:db8::1%" + marker + "]:80\"", // a zone
	"  ", "",
}

var hostileAddrs = []string{
	"203.0.113.9:1234",
	"10.1.2.3:5555", // a trusted proxy below
	"[::ffff:10.1.2.3]:5555",
	marker + "<b>:80",
	"[fe80::1%" + marker + "]:80",
	"",
	strings.Repeat("9", 4096),
}

// subjectRecorder remembers the subjects a store was asked about.
type subjectRecorder struct {
	mu       sync.Mutex
	subjects map[string]bool
}

// store returns a store deciding in a MemoryStore that records subjects.
func (s *subjectRecorder) store() core.Store {
	return fakestore.Over(core.NewMemoryStore(), func(_ context.Context, c bucket.Ask) error {
		s.mu.Lock()
		s.subjects[c.Subj] = true
		s.mu.Unlock()
		return nil
	})
}

func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	keys := map[string]keyfuncs.KeyFunc{
		"IP":                     keyfuncs.IP(),
		"IP trusting 10/8 (XFF)": keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")),
		"IP trusting Forwarded":  keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.ForwardedHeader()),
		"IP trusting X-Real-IP":  keyfuncs.IP(keyfuncs.TrustedHeader("X-Real-IP", "10.0.0.0/8")),
		"Header X-API-Key":       keyfuncs.Header("X-API-Key"),
		"First(Header, IP)":      keyfuncs.First(keyfuncs.Header("X-API-Key"), keyfuncs.IP()),
	}
	headers := []string{"X-API-Key", "X-Forwarded-For", "Forwarded", "X-Real-IP"}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for name, kf := range keys {
		t.Run(name, func(t *testing.T) {
			rec := &subjectRecorder{subjects: map[string]bool{}}
			lim, err := core.New(core.Config{Store: rec.store(), Limit: core.PerMinute(5), FailMode: core.FailClosed, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			h := nethttp.Middleware(lim, nethttp.WithKey(kf))(next)
			statuses := map[int]int{}
			for _, addr := range hostileAddrs {
				for _, hdr := range headers {
					for _, v := range hostileValues {
						r := httptest.NewRequest(http.MethodGet, "/", nil)
						r.RemoteAddr = addr
						r.Header[http.CanonicalHeaderKey(hdr)] = []string{v}
						if hdr == "X-Forwarded-For" {
							r.Header[http.CanonicalHeaderKey(hdr)] = []string{v, "198.51.100.1"} // on two lines, too
						}
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						statuses[w.Code]++
						checkNoEcho(t, w.Result(), w.Body.String())
					}
				}
			}
			for s := range rec.subjects {
				if strings.Contains(s, marker) || len(s) > 80 || strings.ContainsAny(s, "{}\r\n\x00\" ") {
					t.Errorf("client text reached the store as subject %.100q", s)
				}
			}
			t.Logf("%d requests: statuses %v; %d distinct subjects reached the store, none with client text", len(hostileAddrs)*len(headers)*len(hostileValues), statuses, len(rec.subjects))
		})
	}
}

// checkNoEcho fails when a response has an unexpected status or carries
// the marker in its body or any header field.
func checkNoEcho(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusBadRequest, http.StatusTooManyRequests, http.StatusRequestHeaderFieldsTooLarge:
	default:
		t.Fatalf("status %d, want 200, 400, 429 or 431; body %.200q", resp.StatusCode, body)
	}
	if strings.Contains(body, marker) || strings.Contains(body, "<script") {
		t.Fatalf("client input echoed in the body: %.200q", body)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, marker) || strings.Contains(k, marker) {
				t.Fatalf("client input echoed in header %s: %.200q", k, v)
			}
		}
	}
}

// TestHostileRawRequests sends bytes net/http's own client would refuse
// to: header values that are not UTF-8, oversized ones, a header block
// past the server's limit. The server and the middleware answer each with
// a fixed response.
func TestHostileRawRequests(t *testing.T) {
	t.Parallel()
	lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(5), FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(nethttp.Middleware(lim, nethttp.WithKey(keyfuncs.Header("X-API-Key")))(next))
	defer srv.Close()
	for _, tc := range []struct {
		name  string
		value string
		want  int
	}{
		{"not UTF-8", "\xff\xfe" + marker + "\xc3\x28", http.StatusOK},
		{"64 KiB", strings.Repeat(marker, 16<<10), http.StatusBadRequest},
		{"2 MiB header block", strings.Repeat(marker, 512<<10), http.StatusRequestHeaderFieldsTooLarge},
		{"obs-text and HTML", "\x80\x81<script>" + marker, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			go fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nConnection: close\r\n\r\n", tc.value)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d; body %.200q", resp.StatusCode, tc.want, body)
			}
			checkNoEcho(t, resp, string(body))
		})
	}
}

// TestHostileSpoofing: a client rotating forwarding headers to look like
// many clients stays one subject unless its peer is a trusted proxy; from
// behind a trusted proxy, rotating the part of X-Forwarded-For that the
// client writes (the left) changes nothing either.
func TestHostileSpoofing(t *testing.T) {
	t.Parallel()
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, tc := range []struct {
		name   string
		key    keyfuncs.KeyFunc
		remote string
		xff    func(i int) string
	}{
		{"direct client, IP()", keyfuncs.IP(), "203.0.113.9:1234", func(i int) string { return fmt.Sprintf("198.51.100.%d", i) }},
		{"direct client, trusting 10/8", keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")), "203.0.113.9:1234", func(i int) string { return fmt.Sprintf("198.51.100.%d", i) }},
		{"behind the proxy, left side rotated", keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")), "10.0.0.2:1234", func(i int) string { return fmt.Sprintf("198.51.100.%d, 203.0.113.9", i) }},
		{"behind the proxy, /64 rotated", keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")), "10.0.0.2:1234", func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(5), FailMode: core.FailClosed})
			if err != nil {
				t.Fatal(err)
			}
			h := nethttp.Middleware(lim, nethttp.WithKey(tc.key))(next)
			allowed := 0
			for i := range 50 {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = tc.remote
				r.Header.Set("X-Forwarded-For", tc.xff(i))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code == http.StatusOK {
					allowed++
				}
			}
			if allowed != 5 {
				t.Errorf("50 requests with rotated forwarding headers: %d allowed, want 5 (one subject)", allowed)
			}
		})
	}
}

// TestHostileRedisKeys: the hostile values through the middleware against
// real Redis. Every key written is <prefix>{<tag>}:<policy> with a tag
// free of braces and of anything the client wrote.
func TestHostileRedisKeys(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	lim, err := core.New(core.Config{Store: core.NewRedisStore(c, core.WithPrefix(prefix)), Limit: core.PerMinute(5), FailMode: core.FailClosed, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := nethttp.Middleware(lim, nethttp.WithKey(keyfuncs.First(keyfuncs.Header("X-API-Key"), keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8")))))(next)
	for _, v := range hostileValues {
		for _, hdr := range []string{"X-API-Key", "X-Forwarded-For"} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "10.1.2.3:4444"
			r.Header[http.CanonicalHeaderKey(hdr)] = []string{v}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checkNoEcho(t, w.Result(), w.Body.String())
		}
	}
	keys := scanKeys(t, c, prefix)
	if len(keys) == 0 {
		t.Fatal("no key written")
	}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		tag, pol, ok := strings.Cut(strings.TrimPrefix(rest, "{"), "}")
		// A bucket, or a call's replay record ("{<tag>} <call id>").
		record := strings.HasPrefix(pol, " ") && !strings.ContainsAny(pol[1:], " {}:")
		if !strings.HasPrefix(rest, "{") || !ok || (pol != ":"+lim.Name() && !record) || strings.ContainsAny(tag, "{}") || strings.Contains(k, marker) {
			t.Errorf("key %.120q: want %s{<tag without braces or client text>}:%s or a replay record", k, prefix, lim.Name())
		}
	}
	t.Logf("%d Redis keys from %d hostile requests, all %s{<tag>}:%s", len(keys), 2*len(hostileValues), prefix, lim.Name())
}
