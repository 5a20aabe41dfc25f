package main

// The service as Envoy Gateway runs it: config over xDS from a
// go-control-plane snapshot cache over mutual TLS, the RLS itself served
// over mutual TLS, statsd lines to a UDP listener, /rlconfig; and the
// start-up and reload guards an operator meets with broken files.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func (p *proc) grpcHealth(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatalf("gRPC health: %v", err)
	}
	return resp.Status
}

// Never healthy without a config: a missing directory or a broken file at
// start leaves the service not ready, and it says so; a good file then
// makes it ready. FORCE_START_WITHOUT_INITIAL_CONFIG is ready at once.
func TestNotReadyWithoutConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		files map[string]string
	}{
		{"missing dir", nil},
		{"broken file", map[string]string{"edge.yaml": "domain: edge\ndescriptors: [\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.files != nil {
				root = runtimeDir(t, c.files)
			}
			p := launch(t, root, "BACKEND_TYPE=memory")
			waitFor(t, p, "no config loaded yet: not ready")
			if h := p.health(); h != http.StatusInternalServerError {
				t.Errorf("/healthcheck %d, want 500", h)
			}
			if h := p.grpcHealth(t); h != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("gRPC health %v, want NOT_SERVING", h)
			}
			if _, err := p.ask(t, desc("user", "a")); status.Code(err) != codes.Unavailable {
				t.Errorf("a decision without config: %v, want Unavailable", err)
			}
			r, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if r.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("/json without config: %d, want 503", r.StatusCode)
			}
			if strings.Contains(p.logged(), "last good config") {
				t.Errorf("a last good config is claimed where there never was one:\n%s", p.logged())
			}
			os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755)
			writeFile(t, filepath.Join(root, "ratelimit", "config", "edge.yaml"), operatorYAML)
			waitFor(t, p, "config loaded")
			for p.health() != http.StatusOK {
				time.Sleep(20 * time.Millisecond)
			}
			if h := p.grpcHealth(t); h != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("gRPC health %v after the config, want SERVING", h)
			}
			wantCodes(t, p, desc("user", "a"), ok, ok, ok, over)
		})
	}
	t.Run("forced", func(t *testing.T) {
		p := start(t, t.TempDir(), "BACKEND_TYPE=memory", "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
		if h := p.grpcHealth(t); h != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %v, want SERVING", h)
		}
	})
}

// An alias bomb at start leaves the service listening, not ready, and
// answering SIGTERM; one in a reload is refused while the last good
// config serves, and the fix is logged.
func TestAliasBomb(t *testing.T) {
	t.Parallel()
	bomb := aliasBomb(42)
	p := launch(t, runtimeDir(t, map[string]string{"edge.yaml": bomb}), "BACKEND_TYPE=memory")
	waitFor(t, p, "aliases expand it beyond")
	if h := p.health(); h != http.StatusInternalServerError {
		t.Errorf("/healthcheck %d, want 500", h)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10s after SIGTERM")
	}

	root := runtimeDir(t, map[string]string{"edge.yaml": operatorYAML})
	q := start(t, root, "BACKEND_TYPE=memory")
	path := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	writeFile(t, path, bomb)
	waitFor(t, q, "config reload refused; the last good config keeps serving")
	wantCodes(t, q, desc("user", "bomb"), ok, ok, ok, over)
	writeFile(t, path, strings.Replace(operatorYAML, "requests_per_unit: 3", "requests_per_unit: 30", 1))
	waitFor(t, q, "config reloaded: the refused config is fixed")
	if !strings.Contains(q.logged(), "bomb.yaml") && !strings.Contains(q.logged(), "edge.yaml") {
		t.Errorf("the refusal does not name the file:\n%s", q.logged())
	}
}

// aliasBomb is a 3.7 KB config of nested aliases (9^levels descriptors).
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n  - &l0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  - &l%d {key: k%d, descriptors: [*l%d", i, i, i-1)
		for j := 1; j < 9; j++ {
			fmt.Fprintf(&b, ", *l%d", i-1)
		}
		b.WriteString("]}\n")
	}
	return b.String()
}

// certs is a CA and, signed by it, a server and a client key pair, as
// PEM files.
type certs struct{ dir, ca, serverCert, serverKey, clientCert, clientKey string }

func newCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	c := certs{dir: dir, ca: write("ca.pem", "CERTIFICATE", caDER)}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "PRIVATE KEY", kder)
	}
	c.serverCert, c.serverKey = leaf("envoy-gateway", 2, x509.ExtKeyUsageServerAuth)
	c.clientCert, c.clientKey = leaf("envoy-ratelimit", 3, x509.ExtKeyUsageClientAuth)
	return c
}

func (c certs) tls(t *testing.T, server bool) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(c.ca)
	pool.AppendCertsFromPEM(caPEM)
	if server {
		pair, err := tls.LoadX509KeyPair(c.serverCert, c.serverKey)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	}
	pair, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "envoy-gateway"}
}

// xdsServer is Envoy Gateway's side: a snapshot cache served over mTLS
// on a fixed address, which can be stopped and started again.
type xdsServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache
	creds credentials.TransportCredentials
	gs    *grpc.Server

	mu    sync.Mutex
	nacks []string
}

func newXDSServer(t *testing.T, c certs) *xdsServer {
	x := &xdsServer{t: t, addr: "127.0.0.1:" + strconv.Itoa(freePort(t)),
		cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), creds: credentials.NewTLS(c.tls(t, true))}
	x.start()
	t.Cleanup(x.stop)
	return x
}

func (x *xdsServer) start() {
	lis, err := net.Listen("tcp", x.addr)
	if err != nil {
		x.t.Fatal(err)
	}
	srv := serverv3.NewServer(context.Background(), x.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
			if req.ErrorDetail != nil {
				x.mu.Lock()
				x.nacks = append(x.nacks, req.ErrorDetail.Message)
				x.mu.Unlock()
			}
			return nil
		},
	})
	x.gs = grpc.NewServer(grpc.Creds(x.creds))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(x.gs, srv)
	go x.gs.Serve(lis)
}

func (x *xdsServer) stop() { x.gs.Stop() }

func (x *xdsServer) nacked() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.nacks...)
}

func (x *xdsServer) set(version string, cfgs ...*confpb.RateLimitConfig) {
	x.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		x.t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), "gateway-node", snap); err != nil {
		x.t.Fatal(err)
	}
}

func edgeConfig(perMinute uint32, unit confpb.RateLimitUnit) *confpb.RateLimitConfig {
	return &confpb.RateLimitConfig{Name: "default/eg/http", Domain: "edge", Descriptors: []*confpb.RateLimitDescriptor{
		{Key: "user", RateLimit: &confpb.RateLimitPolicy{Unit: unit, RequestsPerUnit: perMinute}},
	}}
}

func TestXDSOverMutualTLS(t *testing.T) {
	t.Parallel()
	c := newCerts(t)
	x := newXDSServer(t, c)
	p := start(t, t.TempDir(), "BACKEND_TYPE=memory",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+x.addr, "CONFIG_GRPC_XDS_NODE_ID=gateway-node",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_SAN=envoy-gateway",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+c.clientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+c.clientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+c.ca, "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=500ms",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+c.serverCert, "GRPC_SERVER_TLS_KEY="+c.serverKey,
		"GRPC_CLIENT_TLS_CACERT="+c.ca, "GRPC_CLIENT_TLS_SAN=envoy-ratelimit")
	// The RLS is served over mTLS: the plain client of start() is refused.
	if _, err := p.ask(t, desc("user", "a")); err == nil {
		t.Fatal("a plaintext client was answered")
	}
	p.conn = dial(t, strings.Replace(p.conn.Target(), "dns:///", "", 1), credentials.NewTLS(c.tls(t, false)))
	p.client = rlspb.NewRateLimitServiceClient(p.conn)
	step := func(s string, args ...any) { t.Logf("step: "+s, args...) }

	_, err := p.ask(t, desc("user", "a"))
	step("no snapshot yet (FORCE_START): /healthcheck %d, decision %v", p.health(), status.Code(err))
	if p.health() != http.StatusOK || status.Code(err) != codes.Unavailable {
		t.Fatalf("before the first config: /healthcheck %d and %v, want 200 and Unavailable", p.health(), err)
	}

	x.set("1", edgeConfig(3, confpb.RateLimitUnit_MINUTE))
	waitFor(t, p, "config loaded")
	wantCodes(t, p, desc("user", "a"), ok, ok, ok, over)
	step("snapshot 1 (3/min): OK OK OK OVER_LIMIT; /rlconfig %q", rlconfig(t, p))
	if got := rlconfig(t, p); got != "edge.user: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig: %q", got)
	}

	limitOf := func() uint32 {
		t.Helper()
		resp, err := p.ask(t, desc("user", "b"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	x.set("2", edgeConfig(5, confpb.RateLimitUnit_MINUTE))
	waitFor(t, p, "config reloaded")
	step("snapshot 2 (5/min): current_limit %d", limitOf())
	if l := limitOf(); l != 5 {
		t.Fatalf("after the update: limit %d, want 5", l)
	}

	x.set("3", edgeConfig(7, confpb.RateLimitUnit_UNKNOWN)) // no unit: refused
	waitFor(t, p, "config reload refused; the last good config keeps serving")
	for len(x.nacked()) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	step("snapshot 3 (no unit): NACK %q; current_limit %d", x.nacked()[0], limitOf())
	if l := limitOf(); l != 5 || !strings.Contains(x.nacked()[0], "invalid rate limit unit") {
		t.Fatalf("after a bad update: limit %d, NACK %q; want 5 and the reason", l, x.nacked())
	}

	x.stop()
	waitFor(t, p, "xDS stream ended; reconnecting")
	step("server gone: current_limit %d, /healthcheck %d", limitOf(), p.health())
	if l := limitOf(); l != 5 || p.health() != http.StatusOK {
		t.Fatalf("server gone: limit %d, /healthcheck %d; want 5 and 200", l, p.health())
	}
	x.set("4", edgeConfig(9, confpb.RateLimitUnit_MINUTE))
	x.start()
	waitFor(t, p, "config reloaded: the refused config is fixed")
	step("server back with snapshot 4 (9/min): current_limit %d", limitOf())
	if l := limitOf(); l != 9 {
		t.Fatalf("server back: limit %d, want 9", l)
	}
	if n := strings.Count(p.logged(), "config reload refused"); n != 1 {
		t.Errorf("the bad update, sent again after each NACK, is logged %d times, want once", n)
	}
}

func rlconfig(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get("http://" + p.debug + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestStatsd(t *testing.T) {
	t.Parallel()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	port := udp.LocalAddr().(*net.UDPAddr).Port
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}), "BACKEND_TYPE=memory",
		"USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(port), "STATSD_PROTOCOL=udp",
		"STATS_FLUSH_INTERVAL=100ms")
	wantCodes(t, p, desc("user", "s"), ok, ok, ok, over)
	want := map[string]uint64{
		"ratelimit.service.rate_limit.edge.user.total_hits":   4,
		"ratelimit.service.rate_limit.edge.user.within_limit": 3,
		"ratelimit.service.rate_limit.edge.user.near_limit":   1,
		"ratelimit.service.rate_limit.edge.user.over_limit":   1,
		"ratelimit.service.config_load_success":               1,
		"ratelimit_server.ShouldRateLimit.total_requests":     4,
		"ratelimit_server.ShouldRateLimit.response_time":      4,
	}
	got := map[string]uint64{}
	var capture []string
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(15 * time.Second)
	for !statsReached(got, want) {
		udp.SetReadDeadline(deadline)
		n, _, err := udp.ReadFrom(buf)
		if err != nil {
			t.Fatalf("statsd lines so far %v: %v", got, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
			capture = append(capture, line)
			name, rest, _ := strings.Cut(line, ":")
			v, kind, _ := strings.Cut(rest, "|")
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && kind == "c" {
				got[name] += n
			}
			if kind == "ms" {
				got[name]++
			}
		}
	}
	t.Logf("statsd capture:\n%s", strings.Join(capture, "\n"))
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %d, want %d", name, got[name], w)
		}
	}
}

func statsReached(got, want map[string]uint64) bool {
	for name, w := range want {
		if got[name] < w {
			return false
		}
	}
	return true
}

// A file rewritten in place is read, for a moment, as its prefix. The
// prefix here lacks the spent rule "tight": served, it would admit every
// request. The service waits for the next poll to agree before it drops
// a rule, so tight stays spent through every rewrite.
func TestFileRewrittenInPlace(t *testing.T) {
	t.Parallel()
	full := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
		"  - key: tight\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	prefix := full[:strings.Index(full, "  - key: tight")]
	root := runtimeDir(t, map[string]string{"edge.yaml": full})
	p := start(t, root, "BACKEND_TYPE=memory", "SLUICE_RELOAD_INTERVAL=200ms")
	wantCodes(t, p, desc("tight", "x"), ok, over)
	path := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 10; i++ {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Error(err)
				return
			}
			f.WriteString(prefix)
			time.Sleep(30 * time.Millisecond) // the writer is slow: one poll at most sees the prefix
			f.WriteString(full[len(prefix):])
			f.Close()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	admitted := 0
	for asked := 0; ; asked++ {
		select {
		case <-done:
			t.Logf("tight asked %d times during 10 rewrites in place, admitted %d", asked, admitted)
			if admitted > 0 {
				t.Errorf("a spent rule admitted %d requests while its file was rewritten", admitted)
			}
			return
		default:
		}
		if p.code(t, desc("tight", "x")) == ok {
			admitted++
		}
	}
}
