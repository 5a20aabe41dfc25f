// Package promtest gives tests Debian's prometheus and promtool: a path to
// either binary through LookPath, and a prometheus server of a test's own
// through Start, on a free loopback port with its own configuration and
// storage, scraping and evaluating its rules every second.
//
// When a binary is not on PATH, tests skip — unless
// RATELIMIT_REQUIRE_PROMETHEUS=1 (set by .ci/run), and then they fail.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to report ready:
// generous, for loaded CI machines.
const startTimeout = 30 * time.Second

// Required reports whether RATELIMIT_REQUIRE_PROMETHEUS=1 asks tests to
// fail, not skip, when prometheus or promtool is missing.
func Required() bool { return os.Getenv("RATELIMIT_REQUIRE_PROMETHEUS") == "1" }

// LookPath returns the path of the binary name (prometheus, promtool),
// skipping t when it is not on PATH, or failing it when Required.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if Required() {
		t.Fatalf("promtest: RATELIMIT_REQUIRE_PROMETHEUS=1 but %s is not on PATH: %v", name, err)
	}
	t.Skipf("promtest: %s is not on PATH (apt-get install prometheus): %v", name, err)
	return ""
}

// Server is a prometheus process of one test's own. It scrapes its
// targets' /metrics and evaluates its rules every second, and is killed,
// its storage removed, when the test ends.
type Server struct {
	t    testing.TB
	addr string
	dir  string
}

// Start starts prometheus for t with the rule file rules (its contents)
// and a scrape job "ratelimit" of targets (host:port), and returns once
// the server reports ready.
func Start(t testing.TB, rules string, targets ...string) *Server {
	t.Helper()
	bin := LookPath(t, "prometheus")
	dir := t.TempDir()
	s := &Server{t: t, dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: ratelimit
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 5 {
		err = s.launch(bin)
		if err == nil {
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break // else another process took the free port first: try another
		}
	}
	t.Fatalf("promtest: %v", err)
	return nil
}

// launch starts prometheus on a free port and waits until it is ready.
func (s *Server) launch(bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(s.dir, "prometheus.log")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer out.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(s.dir, "data"),
		"--web.listen-address="+s.addr,
	)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	s.t.Cleanup(func() {
		stop()
		if s.t.Failed() {
			s.t.Logf("promtest: last lines of prometheus %s's log:\n%s", s.addr, lastLines(logPath, 20))
		}
	})
	deadline := time.Now().Add(startTimeout)
	for {
		if s.ready() {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("prometheus %s exited at start: %s", s.addr, lastLines(logPath, 5))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("prometheus %s not ready within %v: %s", s.addr, startTimeout, lastLines(logPath, 5))
		}
	}
}

func (s *Server) ready() bool {
	resp, err := http.Get("http://" + s.addr + "/-/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return s.addr }

// Alert is an alert as /api/v1/alerts lists it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"` // pending or firing
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// Alerts returns the server's pending and firing alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	err := s.get(ctx, "/api/v1/alerts", &data)
	return data.Alerts, err
}

// Sample is one series of an instant query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates the instant vector expression expr now.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("promtest: query %s: result type %q, want vector", expr, data.ResultType)
	}
	samples := make([]Sample, len(data.Result))
	for i, r := range data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("promtest: query %s: value %v: %w", expr, r.Value[1], err)
		}
		samples[i] = Sample{Labels: r.Metric, Value: v}
	}
	return samples, nil
}

// get decodes the data of the API response to path into v.
func (s *Server) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("promtest: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("promtest: GET %s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("promtest: GET %s: %s: %s", path, resp.Status, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// freePort returns a loopback port nobody listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
