// Command envoy compares ratelimit-envoy with envoyproxy/ratelimit's own
// service (the reference), both built from their Go modules and run as
// operators run them, on Redis servers of their own on loopback, with the
// same config, driven by go-control-plane's RLS client:
//
//   - ShouldRateLimit per second and latency percentiles, -conc callers
//     over -keys keys, -descriptors descriptors per request (1 to 3:
//     the client's address, its tenant, its route), each side for
//     -duration; the service's CPU per request (/proc), Redis CPU and
//     commands per request from INFO over the run, and round trips per request (Redis read events) from one
//     caller sending 500 requests one after the other;
//   - the window edge: 5 per second on one key, -edge requests just before
//     a second boundary and as many just after; admitted against C + R·Δ;
//   - Redis stalled (SIGSTOP): -stalled concurrent requests, the time and
//     kind of each answer, DeadlineExceeded when none came by -deadline.
//
// With -cpuprofile, each service's CPU profile over its first throughput
// round (both serve Go's /debug/pprof/profile on DEBUG_PORT) is written
// to that file, suffixed .ours and .reference, for go tool pprof.
//
// Run from bench/envoy: go run . (redis-server on PATH). It prints Markdown.
// A module of its own, so the reference's dependencies never enter the
// library's or the other benchmarks' graphs.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const config = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: edge
    rate_limit: {unit: second, requests_per_unit: 5}
`

var (
	duration = flag.Duration("duration", 3*time.Second, "one throughput round per service")
	rounds   = flag.Int("rounds", 3, "interleaved throughput rounds")
	conc     = flag.Int("conc", 32, "concurrent callers")
	keys     = flag.Int("keys", 10000, "distinct keys in the throughput run")
	descs    = flag.Int("descriptors", 1, "descriptors per request in the throughput run (1 to 3)")
	edge     = flag.Int("edge", 10, "requests on each side of the second boundary")
	stalled  = flag.Int("stalled", 8, "concurrent requests while Redis is stalled")
	deadline = flag.Duration("deadline", 15*time.Second, "the callers' deadline while Redis is stalled")
	cpuprof  = flag.String("cpuprofile", "", "write each service's CPU profile over its first round to this file .ours, .reference")
)

type service struct {
	name, bin string
	env       []string
	suffix    string // of its -cpuprofile file
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/envoy:", err)
		os.Exit(1)
	}
}

func run() error {
	if *descs < 1 || *descs > 3 {
		return fmt.Errorf("-descriptors %d: want 1 to 3", *descs)
	}
	tmp, err := os.MkdirTemp("", "bench-envoy")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ours, ref := filepath.Join(tmp, "ratelimit-envoy"), filepath.Join(tmp, "reference")
	for bin, pkg := range map[string]string{
		ours: "github.com/sluicehq/ratelimit/envoy/cmd/ratelimit-envoy",
		ref:  "github.com/envoyproxy/ratelimit/src/service_cmd",
	} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	root := filepath.Join(tmp, "runtime")
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "rl", "config", "bench.yaml"), []byte(config), 0o644); err != nil {
		return err
	}
	common := []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp",
	}
	services := []service{
		{"ratelimit-envoy", ours, common, ".ours"},
		{"envoyproxy/ratelimit", ref, common, ".reference"},
	}

	type running struct {
		service
		r    *redisServer
		p    *proc
		n    int64
		t    time.Duration
		errs int64
		lat  []time.Duration
		cpu  float64 // Redis CPU seconds over the throughput rounds
		svc  float64 // the service's CPU seconds over the throughput rounds
		cmds int64   // Redis commands over the throughput rounds
		trip float64 // Redis read events per request, one caller
	}
	var all []*running
	defer func() {
		for _, x := range all {
			x.p.stop()
			x.r.stop()
		}
	}()
	for _, s := range services {
		r, err := startRedis()
		if err != nil {
			return err
		}
		p, err := startService(s, r.addr)
		if err != nil {
			r.stop()
			return fmt.Errorf("%s: %w", s.name, err)
		}
		all = append(all, &running{service: s, r: r, p: p})
	}
	// Throughput in interleaved rounds, so both see the same machine.
	for round := 0; round < *rounds; round++ {
		for _, x := range all {
			before, err := x.r.info()
			if err != nil {
				return err
			}
			svc0, err := x.p.cpu()
			if err != nil {
				return err
			}
			var prof chan error
			if *cpuprof != "" && round == 0 {
				prof = make(chan error, 1)
				go func() { prof <- x.p.profile(*cpuprof+x.suffix, *duration) }()
			}
			n, d, errs, lat := throughput(x.p)
			if prof != nil {
				if err := <-prof; err != nil {
					return fmt.Errorf("%s: CPU profile: %w", x.name, err)
				}
			}
			after, err := x.r.info()
			if err != nil {
				return err
			}
			svc1, err := x.p.cpu()
			if err != nil {
				return err
			}
			x.svc += svc1 - svc0
			x.n, x.t, x.errs = x.n+n, x.t+d, x.errs+errs
			x.lat = append(x.lat, lat...)
			x.cpu += after.cpu - before.cpu
			x.cmds += after.commands - before.commands
		}
	}
	for _, x := range all {
		var err error
		if x.trip, err = roundTrips(x.p, x.r); err != nil {
			return err
		}
	}
	fmt.Printf("## Envoy rate limit service: ratelimit-envoy vs envoyproxy/ratelimit\n\n")
	fmt.Printf("Each on a redis-server of its own on loopback; %d callers on %d gRPC connections, %d keys, "+
		"%d descriptors per request, %d interleaved rounds of %v each.\n\n", *conc, *conc, *keys, *descs, *rounds, *duration)
	fmt.Printf("| service | ShouldRateLimit/s | p50 | p99 | errors | service CPU µs / request | Redis CPU µs / request | Redis commands / request | round trips / request (one caller) | window edge: admitted (C + R·Δ) | Redis stalled: answers (slowest) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range all {
		slices.Sort(x.lat)
		admitted, bound, delta := windowEdge(x.p)
		kinds, slowest := stall(x.p, x.r)
		fmt.Printf("| %s | %.0f | %v | %v | %d | %.1f | %.1f | %.2f | %.2f | %d in %v (%d) | %s (%v) |\n",
			x.name, float64(x.n)/x.t.Seconds(), x.lat[len(x.lat)/2].Round(time.Microsecond),
			x.lat[len(x.lat)*99/100].Round(time.Microsecond), x.errs, x.svc*1e6/float64(x.n),
			x.cpu*1e6/float64(x.n), float64(x.cmds)/float64(x.n), x.trip,
			admitted, delta.Round(time.Millisecond), bound, kinds, slowest.Round(time.Millisecond))
	}
	return nil
}

// request is one request with a descriptor of one entry per key, value
// pair.
func request(kv ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: "bench"}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &rlpb.RateLimitDescriptor{
			Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return r
}

// benchRequest is a throughput request on client key i: *descs
// descriptors, the address i, its tenant i/10 and its route i%10.
func benchRequest(i int) *rlspb.RateLimitRequest {
	kv := []string{"remote_address", strconv.Itoa(i), "tenant", strconv.Itoa(i / 10), "route", strconv.Itoa(i % 10)}
	return request(kv[:2**descs]...)
}

// roundTrips sends 500 requests one after the other and returns Redis's
// read events per request: one per round trip when nothing else calls.
func roundTrips(p *proc, r *redisServer) (float64, error) {
	const n = 500
	before, err := r.info()
	if err != nil {
		return 0, err
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := p.clients[0].ShouldRateLimit(ctx, benchRequest(i))
		cancel()
		if err != nil {
			return 0, err
		}
	}
	after, err := r.info()
	if err != nil {
		return 0, err
	}
	return float64(after.reads-before.reads) / n, nil
}

// throughput runs *conc callers for *duration on random keys.
func throughput(p *proc) (n int64, elapsed time.Duration, errs int64, lat []time.Duration) {
	var count, failed atomic.Int64
	var mu sync.Mutex
	stop := time.Now().Add(*duration)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := 0; i < *conc; i++ {
		c := p.clients[i%len(p.clients)]
		wg.Go(func() {
			var mine []time.Duration
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for time.Now().Before(stop) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_, err := c.ShouldRateLimit(ctx, benchRequest(rng.IntN(*keys)))
				cancel()
				mine = append(mine, time.Since(t0))
				if err != nil {
					failed.Add(1)
				}
				count.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return count.Load(), time.Since(begin), failed.Load(), lat
}

// windowEdge sends *edge requests 40ms before a second boundary and as
// many 10ms after it, on one key limited to 5 per second.
func windowEdge(p *proc) (admitted int, bound int, delta time.Duration) {
	boundary := time.Now().Truncate(time.Second).Add(2 * time.Second)
	var ok atomic.Int64
	burst := func() {
		var wg sync.WaitGroup
		for i := 0; i < *edge; i++ {
			c := p.clients[i%len(p.clients)]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				resp, err := c.ShouldRateLimit(ctx, request("edge", "k"))
				if err == nil && resp.OverallCode == rlspb.RateLimitResponse_OK {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
	}
	time.Sleep(time.Until(boundary.Add(-40 * time.Millisecond)))
	begin := time.Now()
	burst()
	time.Sleep(time.Until(boundary.Add(10 * time.Millisecond)))
	burst()
	delta = time.Since(begin)
	return int(ok.Load()), 5 + int(5*delta.Seconds()), delta
}

// stall stops Redis (SIGSTOP) and sends *stalled concurrent requests.
func stall(p *proc, r *redisServer) (kinds string, slowest time.Duration) {
	r.cmd.Process.Signal(syscall.SIGSTOP)
	defer r.cmd.Process.Signal(syscall.SIGCONT)
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < *stalled; i++ {
		c := p.clients[i%len(p.clients)]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), *deadline)
			defer cancel()
			begin := time.Now()
			resp, err := c.ShouldRateLimit(ctx, request("remote_address", "stalled-"+strconv.Itoa(i)))
			d := time.Since(begin)
			kind := ""
			if err != nil {
				kind = status.Code(err).String()
			} else {
				kind = resp.OverallCode.String()
			}
			mu.Lock()
			count[kind]++
			slowest = max(slowest, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	var parts []string
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", "), slowest
}

type proc struct {
	cmd     *exec.Cmd
	debug   int // DEBUG_PORT
	log     string
	conns   []*grpc.ClientConn
	clients []rlspb.RateLimitServiceClient
}

func (p *proc) stop() {
	for _, c := range p.conns {
		c.Close()
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	os.Remove(p.log)
}

// cpu returns the service's user and system CPU seconds so far, from
// /proc/<pid>/stat (utime and stime, in clock ticks of 1/100 s).
func (p *proc) cpu() (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", p.cmd.Process.Pid, b)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil
}

// profile writes the service's CPU profile over the next d (whole
// seconds, at least 1) to file.
func (p *proc) profile(file string, d time.Duration) error {
	secs := max(int((d+time.Second-1)/time.Second), 1)
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(p.debug) + "/debug/pprof/profile?seconds=" + strconv.Itoa(secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startService(s service, redisAddr string) (*proc, error) {
	var ports [3]int
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(s.bin)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Env = append(cmd.Env, "REDIS_URL="+redisAddr,
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]))
	log, err := os.CreateTemp("", "bench-envoy-log")
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log // the reference logs its statistics at debug level
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, debug: ports[2], log: log.Name()}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("not healthy after 30s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < *conc; i++ {
		conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(ports[1]), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.stop()
			return nil, err
		}
		p.conns = append(p.conns, conn)
		p.clients = append(p.clients, rlspb.NewRateLimitServiceClient(conn))
	}
	return p, nil
}

type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis() (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("redis-server did not start")
	}
	return &redisServer{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port)}, nil
}

func (r *redisServer) stop() {
	r.cmd.Process.Signal(syscall.SIGCONT)
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

type redisInfo struct {
	cpu             float64 // used_cpu_user + used_cpu_sys, seconds
	commands, reads int64   // total_commands_processed, total_reads_processed
}

// info reads the server's INFO over a connection of its own (1 command, 1
// read event of its own: negligible beside the runs it brackets).
func (r *redisServer) info() (redisInfo, error) {
	var ri redisInfo
	c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
	if err != nil {
		return ri, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("INFO\r\n")); err != nil {
		return ri, err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil {
		return ri, err
	}
	size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return ri, fmt.Errorf("INFO: %q", head)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return ri, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			ri.cpu += f
		case "total_commands_processed":
			ri.commands, _ = strconv.ParseInt(v, 10, 64)
		case "total_reads_processed":
			ri.reads, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return ri, nil
}
