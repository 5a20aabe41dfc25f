package main

// Tests as an operator runs the service: the binary built once, started
// with the reference's environment variables and a config directory, and
// driven over loopback by go-control-plane's RLS client.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratelimit-envoy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ratelimit-envoy")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const operatorYAML = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: edge
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, usage: true}
`

// runtimeDir writes the config files under root/ratelimit/config, as the
// reference reads RUNTIME_ROOT=root RUNTIME_SUBDIRECTORY=ratelimit.
func runtimeDir(t *testing.T, files map[string]string) (root string) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	return root
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type proc struct {
	cmd    *exec.Cmd
	client rlspb.RateLimitServiceClient
	conn   *grpc.ClientConn
	http   string
	debug  string
	mu     sync.Mutex
	log    bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) logged() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the binary with the reference's variables (plus env) and
// waits for /healthcheck.
func start(t *testing.T, root string, env ...string) *proc {
	t.Helper()
	p := launch(t, root, env...)
	deadline := time.Now().Add(15 * time.Second)
	for p.health() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("the service did not become healthy:\n%s", p.logged())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// launch runs the binary and returns once it listens, healthy or not.
func launch(t *testing.T, root string, env ...string) *proc {
	t.Helper()
	gport, hport, dport := freePort(t), freePort(t), freePort(t)
	p := &proc{http: "127.0.0.1:" + strconv.Itoa(hport), debug: "127.0.0.1:" + strconv.Itoa(dport)}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(os.Environ(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(hport), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(gport),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(dport),
		"USE_STATSD=false", "LOG_LEVEL=info", "SLUICE_RELOAD_INTERVAL=100ms",
	)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("service log:\n%s", p.logged())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for p.health() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the service does not listen:\n%s", p.logged())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.conn = dial(t, "127.0.0.1:"+strconv.Itoa(gport), insecure.NewCredentials())
	p.client = rlspb.NewRateLimitServiceClient(p.conn)
	return p
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// health is /healthcheck's status code, 0 when it does not answer.
func (p *proc) health() int {
	resp, err := http.Get("http://" + p.http + "/healthcheck")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (p *proc) ask(t *testing.T, ds ...*rlpb.RateLimitDescriptor) (*rlspb.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: ds})
}

func (p *proc) code(t *testing.T, ds ...*rlpb.RateLimitDescriptor) rlspb.RateLimitResponse_Code {
	t.Helper()
	resp, err := p.ask(t, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

func wantCodes(t *testing.T, p *proc, d *rlpb.RateLimitDescriptor, want ...rlspb.RateLimitResponse_Code) {
	t.Helper()
	for i, w := range want {
		if got := p.code(t, d); got != w {
			t.Fatalf("request %d: %v, want %v", i+1, got, w)
		}
	}
}

func TestMemoryBackend(t *testing.T) {
	t.Parallel()
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}), "BACKEND_TYPE=memory")
	wantCodes(t, p, desc("user", "alice"), ok, ok, ok, over)
	if !strings.Contains(p.logged(), "BACKEND_TYPE=memory") {
		t.Error("no log line says the store is in-process")
	}
	allOrNothing(t, p)
}

// allOrNothing: a request refused by one descriptor charges none.
func allOrNothing(t *testing.T, p *proc) {
	t.Helper()
	if c := p.code(t, desc("user", "bob"), desc("tight", "bob")); c != ok {
		t.Fatalf("first pair: %v", c)
	}
	resp, err := p.ask(t, desc("user", "bob"), desc("tight", "bob"))
	if err != nil || resp.OverallCode != over || resp.Statuses[0].Code != ok {
		t.Fatalf("second pair: %v %v, want OVER_LIMIT with user OK", resp, err)
	}
	// bob's user bucket still holds 2: the refused request took nothing.
	wantCodes(t, p, desc("user", "bob"), ok, ok, over)
}

func TestWindowEdge(t *testing.T) {
	t.Parallel()
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}), "BACKEND_TYPE=memory")
	// 5 per second. A fixed window admits 5 just before a second boundary
	// and 5 more just after it: 10 within milliseconds. A token bucket
	// admits at most 5 + 5/s × Δ over any interval Δ.
	boundary := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(boundary.Add(-30 * time.Millisecond)))
	begin := time.Now()
	admitted := 0
	for i := 0; i < 20; i++ {
		if i == 10 { // 10 before the boundary, 10 after
			time.Sleep(time.Until(boundary.Add(10 * time.Millisecond)))
		}
		if p.code(t, desc("edge", "k")) == ok {
			admitted++
		}
	}
	elapsed := time.Since(begin)
	bound := 5 + int(5*elapsed.Seconds())
	t.Logf("admitted %d of 20 in %v around a second boundary (bound %d)", admitted, elapsed, bound)
	if admitted > bound {
		t.Errorf("admitted %d in %v, above C + R·Δ = %d", admitted, elapsed, bound)
	}
}

func TestReloadAndBadFiles(t *testing.T) {
	t.Parallel()
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	p := start(t, root, "BACKEND_TYPE=memory")
	limitOf := func() uint32 {
		resp, err := p.ask(t, desc("user", "reload"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limitOf(); got != 3 {
		t.Fatalf("limit %d, want 3", got)
	}
	cfgPath := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	writeFile(t, cfgPath, strings.Replace(operatorYAML, "requests_per_unit: 3", "requests_per_unit: 30", 1))
	waitFor(t, p, "config reloaded")
	if got := limitOf(); got != 30 {
		t.Fatalf("after reload: limit %d, want 30", got)
	}
	// A misspelt key in a second file refuses the whole reload.
	writeFile(t, filepath.Join(root, "ratelimit", "config", "bad.yaml"), "domain: other\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n")
	waitFor(t, p, "config reload refused")
	if got := limitOf(); got != 30 {
		t.Errorf("after a bad file: limit %d, want the last good 30", got)
	}
	if log := p.logged(); !strings.Contains(log, "bad.yaml") || !strings.Contains(log, "rate_limt") {
		t.Errorf("the refusal does not name the file and key:\n%s", log)
	}
}

// waitFor waits for a log line: the event a reload test needs to see
// happen, not a retried assertion.
func waitFor(t *testing.T, p *proc, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.logged(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRedisTwoProcessesShareOneLimit(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + addr, "CACHE_KEY_PREFIX=" + redistest.Prefix(t)}
	a, b := start(t, root, env...), start(t, root, env...)
	wantCodes(t, a, desc("user", "carol"), ok, ok)
	wantCodes(t, b, desc("user", "carol"), ok, over)
	wantCodes(t, a, desc("user", "carol"), over)
	allOrNothing(t, b)
}

// An AI gateway's flow across two replicas on one Redis: a check
// (hits_addend 0) as the request starts, the tokens charged when the
// stream ends, then the next check refused while the key owes.
func TestRedisUsageTwoProcesses(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + addr, "CACHE_KEY_PREFIX=" + redistest.Prefix(t)}
	a, b := start(t, root, env...), start(t, root, env...)
	tokens := func(n uint64) *rlpb.RateLimitDescriptor {
		d := desc("tokens", "tenant1")
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	wantCodes(t, a, tokens(0), ok)
	resp, err := b.ask(t, tokens(1500)) // the stream used 1500 of 1000 a minute
	if err != nil || resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("charge at stream end: %v %v, want OK with 0 left", resp, err)
	}
	resp, err = a.ask(t, tokens(0))
	if err != nil {
		t.Fatal(err)
	}
	// 500 owed and one token to come, 60ms each: 30.06s less the time since the charge.
	if w := resp.Statuses[0].DurationUntilReset.AsDuration(); resp.OverallCode != over || w <= 20*time.Second || w > 30060*time.Millisecond {
		t.Errorf("next check: %v until %v, want OVER_LIMIT until about 30s", resp.OverallCode, w)
	}
}

func TestRedisStalled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr()}
	byDefault := start(t, root, env...)
	open := start(t, root, append(env, "SLUICE_FAIL_MODE=open")...)
	wantCodes(t, byDefault, desc("user", "dave"), ok)
	wantCodes(t, open, desc("user", "erin"), ok)
	srv.Stall()
	defer srv.Resume()
	// The reference would wait REDIS_TIMEOUT (10s) on each. Every answer
	// here comes by the decision timeout (50ms): the bound below only
	// guards against a hang, it is no latency assertion.
	var slowest time.Duration
	for i := 0; i < 10; i++ {
		begin := time.Now()
		_, err := byDefault.ask(t, desc("user", "dave"), desc("tight", "dave"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stalled, default: %v, want Unavailable (Envoy's failure_mode_deny decides)", err)
		}
		slowest = max(slowest, time.Since(begin))
		begin = time.Now()
		if c := open.code(t, desc("user", "erin")); c != ok {
			t.Fatalf("stalled, SLUICE_FAIL_MODE=open: %v, want OK", c)
		}
		slowest = max(slowest, time.Since(begin))
	}
	t.Logf("slowest answer with Redis stalled: %v", slowest)
	if slowest > 3*time.Second {
		t.Errorf("an answer took %v with Redis stalled", slowest)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a cluster takes seconds to form")
	}
	c := redistest.StartCluster(t, 3, 0)
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	p := start(t, root, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(c.Addrs(), ","))
	wantCodes(t, p, desc("user", "frank"), ok, ok, ok, over)
	allOrNothing(t, p) // user and tight of bob: one slot (hash tag {bob})
	// Descriptors on different nodes: still all or nothing, given back.
	if c := p.code(t, desc("user", "n1"), desc("tight", "n2")); c != ok {
		t.Fatalf("first cross-node pair: %v", c)
	}
	if c := p.code(t, desc("user", "n1"), desc("tight", "n2")); c != over {
		t.Fatalf("second cross-node pair: %v", c)
	}
	wantCodes(t, p, desc("user", "n1"), ok, ok, over)
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sentinels take seconds to start")
	}
	s := redistest.StartSentinel(t)
	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	url := s.MasterName() + "," + strings.Join(s.SentinelAddrs(), ",")
	p := start(t, root, "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL="+url)
	wantCodes(t, p, desc("user", "grace"), ok, ok, ok, over)
}

func TestUnsupportedNamed(t *testing.T) {
	t.Parallel()
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}),
		"BACKEND_TYPE=memory", "REDIS_PERSECOND=true", "LOCAL_CACHE_SIZE_IN_BYTES=1000", "STATSD_HOST=127.0.0.1")
	log := p.logged()
	if !strings.Contains(log, "not supported and are ignored: LOCAL_CACHE_SIZE_IN_BYTES, REDIS_PERSECOND") {
		t.Errorf("unsupported variables not named:\n%s", log)
	}
}

// The reference's HTTP endpoint, response headers, shadow mode and
// Prometheus series, as an operator switches them on.
func TestHeadersShadowJSONMetrics(t *testing.T) {
	t.Parallel()
	promPort := freePort(t)
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}),
		"BACKEND_TYPE=memory", "SHADOW_MODE=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+strconv.Itoa(promPort))
	resp, err := p.ask(t, desc("tight", "h"))
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, v := range resp.ResponseHeadersToAdd {
		h[v.Key] = v.Value
	}
	if h["RateLimit-Limit"] != "1" || h["X-Left"] != "0" || h["RateLimit-Reset"] != "60" {
		t.Errorf("headers %v", h)
	}
	// Shadow mode: over the limit, reported, but OK overall.
	resp, err = p.ask(t, desc("tight", "h"))
	if err != nil || resp.OverallCode != ok || resp.Statuses[0].Code != over {
		t.Errorf("shadow: %v %v, want OK overall with OVER_LIMIT reported", resp, err)
	}
	post := func(body string) int {
		r, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if c := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`); c != http.StatusOK {
		t.Errorf("/json: %d", c)
	}
	if c := post(`{"domain":`); c != http.StatusBadRequest {
		t.Errorf("/json with a broken body: %d, want 400", c)
	}
	r, err := http.Get("http://127.0.0.1:" + strconv.Itoa(promPort) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	r.Body.Close()
	for _, series := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="tight",key2=""} 2`,
		`ratelimit_service_rate_limit_shadow_mode{domain="edge",key1="tight",key2=""} 1`,
		`ratelimit_service_config_load_success 1`,
		`ratelimit_decisions_total{outcome="would_deny",policy="edge.tight"} 1`,
	} {
		if !strings.Contains(body.String(), series) {
			t.Errorf("no %s in the metrics", series)
		}
	}
}

// Issue 41's case, as an operator meets it: on Redis, a give-back of 100
// (is_negative_hits) on a bucket of 10 that is empty gives back up to the
// burst and answers OK, and a cost above the burst is OVER_LIMIT — never
// a gRPC error.
func TestRedisGiveBackAboveBurst(t *testing.T) {
	t.Parallel()
	root := runtimeDir(t, map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
`})
	p := start(t, root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redistest.Addr(t), "CACHE_KEY_PREFIX="+redistest.Prefix(t))
	hits := func(n uint64, back bool) *rlpb.RateLimitDescriptor {
		d := desc("ten", "k")
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), back
		return d
	}
	for _, step := range []struct {
		d         *rlpb.RateLimitDescriptor
		code      rlspb.RateLimitResponse_Code
		remaining uint32
	}{
		{hits(10, false), ok, 0},    // the bucket emptied
		{hits(100, true), ok, 10},   // 100 given back: up to the burst
		{hits(11, false), over, 10}, // above the burst: never passes
		{hits(10, false), ok, 0},    // the burst, back
	} {
		resp, err := p.ask(t, step.d)
		if err != nil {
			t.Fatalf("hits %d (negative %v): %v", step.d.HitsAddend.GetValue(), step.d.IsNegativeHits, err)
		}
		if st := resp.Statuses[0]; resp.OverallCode != step.code || st.LimitRemaining != step.remaining {
			t.Fatalf("hits %d (negative %v): %v with %d remaining, want %v with %d",
				step.d.HitsAddend.GetValue(), step.d.IsNegativeHits, resp.OverallCode, st.LimitRemaining, step.code, step.remaining)
		}
	}
}
