package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

const exampleYAML = `
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: generic_key
    value: login
    shadow_mode: true
    rate_limit:
      name: login
      unit: second
      requests_per_unit: 2
  - key: header_match
    value: free
    descriptors:
      - key: user
        rate_limit:
          unit: hour
          requests_per_unit: 100
          unit_multiplier: 6
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: path
    value: /api/*/items
    rate_limit:
      unit: minute
      requests_per_unit: 7
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: internal
    rate_limit:
      unlimited: true
  - key: tenant
    detailed_metric: true
    metadata:
      anything: {goes: [1, 2]}
    rate_limit:
      name: tenant
      replaces:
        - name: login
      unit: day
      requests_per_unit: 1000
`

func mustParse(t *testing.T, files ...File) *Config {
	t.Helper()
	c, err := ParseConfig(files, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMatch(t *testing.T) {
	c := mustParse(t, File{"api.yaml", []byte(exampleYAML)})
	tests := []struct {
		name        string
		entries     []entry
		wantName    string
		wantSubject string
		wantLimit   core.Limit
	}{
		{"key only", []entry{{"remote_address", "203.0.113.7"}}, "api.remote_address", "203.0.113.7", core.PerMinute(10)},
		{"key and value", []entry{{"generic_key", "login"}}, "api.generic_key_login", "login", core.PerSecond(2)},
		{"nested with multiplier", []entry{{"header_match", "free"}, {"user", "u1"}}, "api.header_match_free.user", "free|u1",
			core.Limit{Rate: 100, Period: 6 * time.Hour, Burst: 100}},
		{"shared wildcard", []entry{{"path", "/files/a.txt"}}, "api.path_/files/*", "/files/*", core.PerMinute(5)},
		{"middle wildcard", []entry{{"path", "/api/v1/items"}}, "api.path_/api/*/items", "/api/v1/items", core.PerMinute(7)},
		{"escaped values", []entry{{"header_match", "free"}, {"user", `a|b\c`}}, "api.header_match_free.user", `free|a\|b\\c`,
			core.Limit{Rate: 100, Period: 6 * time.Hour, Burst: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, subject := c.match("api", tt.entries)
			if r == nil {
				t.Fatal("no rule matched")
			}
			lim, ok := r.Limit()
			if r.Name != tt.wantName || subject != tt.wantSubject || !ok || lim != tt.wantLimit {
				t.Errorf("got %q %q %v %v, want %q %q %v", r.Name, subject, lim, ok, tt.wantName, tt.wantSubject, tt.wantLimit)
			}
		})
	}
	for _, miss := range [][]entry{
		{{"header_match", "free"}},                 // no rule at that depth
		{{"remote_address", "x"}, {"user", "u"}},   // deeper than the rule
		{{"path", "/other"}},                       // no wildcard matches
		{{"unknown", "x"}},                         // no such key
		{{"header_match", "paid"}, {"user", "u1"}}, // value differs
	} {
		if r, _ := c.match("api", miss); r != nil {
			t.Errorf("Match(%v) = %s, want no rule", miss, r.FullKey)
		}
	}
	if r, _ := c.match("other", []entry{{"remote_address", "x"}}); r != nil {
		t.Error("an unknown domain matched")
	}
	if r, _ := c.match("api", []entry{{"blocked", "x"}}); r == nil || r.RequestsPerUnit != 0 {
		t.Error("requests_per_unit: 0 did not load")
	} else if _, ok := r.Limit(); ok {
		t.Error("requests_per_unit: 0 has a limit")
	}
	if r, _ := c.match("api", []entry{{"internal", "x"}}); r == nil || !r.Unlimited {
		t.Error("unlimited did not load")
	}
	if r, _ := c.match("api", []entry{{"tenant", "t"}}); r == nil || len(r.Replaces) != 1 || r.Replaces[0] != "login" || !r.DetailedMetric {
		t.Errorf("replaces/detailed_metric did not load: %+v", r)
	}
}

func TestSubject(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{"203.0.113.7"}, "203.0.113.7"},
		{[]string{""}, "|"},
		{[]string{"a", "b"}, "a|b"},
		{[]string{"a|b", "c"}, `a\|b|c`},
		{[]string{"a", "b|c"}, `a|b\|c`},
		{[]string{`\`}, `\\`},
	} {
		if got := subjectOf(tt.in); got != tt.want {
			t.Errorf("subjectOf(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPolicyNameTooLong(t *testing.T) {
	long := "api." + strings.Repeat("k", 80)
	got := policyName(long)
	if !strings.HasPrefix(got, "envoy-") || len(got) != 38 {
		t.Errorf("policyName(long) = %q", got)
	}
	if got := policyName("api.path_/a b"); !strings.HasPrefix(got, "envoy-") {
		t.Errorf("a name with a space = %q, want a digest", got)
	}
}

func TestConfigRefused(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"misspelt key", "domain: a\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n", "unknown key 'rate_limt'"},
		{"misspelt nested key", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      request_per_unit: 1\n", "unknown key 'request_per_unit'"},
		{"empty domain", "descriptors: []\n", "empty domain"},
		{"empty file", "", "empty domain"},
		{"empty key", "domain: a\ndescriptors:\n  - value: v\n", "empty key"},
		{"bad unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", "invalid rate limit unit 'fortnight'"},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", "unit when unlimited"},
		{"duplicate key", "domain: a\ndescriptors:\n  - key: k\n  - key: k\n", "duplicate descriptor composite key 'a.k'"},
		{"empty replaces", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", "empty replaces"},
		{"replaces itself", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: n\n", "same descriptor"},
		{"share_threshold without wildcard", "domain: a\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold"},
		{"list of scalars", "domain: a\ndescriptors:\n  - k\n", "list of type other than map"},
		{"not yaml", "domain: [", "error loading config file"},
		{"usage unlimited", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      usage: true\n      unlimited: true\n", "cannot be unlimited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]File{{"f.yaml", []byte(tt.yaml)}}, ConfigOptions{})
			if err == nil || !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "f.yaml") {
				t.Errorf("err = %v, want errConfig naming f.yaml and %q", err, tt.want)
			}
		})
	}
	if _, err := ParseConfig([]File{{"f.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      usage: true\n      unit: minute\n      requests_per_unit: 1000\n")}},
		ConfigOptions{}); err != nil {
		t.Errorf("usage limit refused: %v", err)
	}
}

func TestDuplicateDomain(t *testing.T) {
	a := File{"a.yaml", []byte("domain: d\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := File{"b.yaml", []byte("domain: d\ndescriptors:\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	if _, err := ParseConfig([]File{a, b}, ConfigOptions{}); err == nil || !strings.Contains(err.Error(), "duplicate domain") {
		t.Errorf("err = %v, want duplicate domain", err)
	}
	c, err := ParseConfig([]File{a, b}, ConfigOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c.match("d", []entry{{"y", "1"}}); r == nil {
		t.Error("merged domain lacks b.yaml's descriptor")
	}
}

func TestLoaderAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	l := &Loader{Dir: dir}
	cfg, changed, err := l.Load()
	if err != nil || !changed || len(cfg.Domains()) != 1 {
		t.Fatalf("first load: %v %v %v", cfg, changed, err)
	}
	if _, changed, err := l.Load(); err != nil || changed {
		t.Errorf("unchanged files: changed=%v err=%v", changed, err)
	}
	write("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limt: {}\n")
	if _, _, err := l.Load(); err == nil || !strings.Contains(err.Error(), "b.yaml") {
		t.Errorf("bad file: err = %v, want one naming b.yaml", err)
	}
	write("b.yaml", "domain: b\n")
	cfg, changed, err = l.Load()
	if err != nil || !changed || strings.Join(cfg.Domains(), ",") != "a,b" {
		t.Errorf("fixed file: %v %v %v", cfg, changed, err)
	}
	write(".hidden", "not yaml: [")
	if _, _, err := l.Load(); err == nil {
		t.Error("a dot file was not read without IgnoreDotFiles")
	}
	l.IgnoreDotFiles = true
	if _, _, err := l.Load(); err != nil {
		t.Errorf("IgnoreDotFiles: %v", err)
	}
}

// A root that is a symbolic link swapped to another directory (the
// reference's RUNTIME_ROOT=/srv/runtime_data/current) is followed.
func TestLoaderFollowsSwappedRoot(t *testing.T) {
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(base, v), 0o755); err != nil {
			t.Fatal(err)
		}
		data := "domain: " + v + "\n"
		if err := os.WriteFile(filepath.Join(base, v, "a.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	current := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), current); err != nil {
		t.Fatal(err)
	}
	l := &Loader{Dir: current}
	if cfg, _, err := l.Load(); err != nil || cfg.Domains()[0] != "v1" {
		t.Fatalf("v1: %v %v", cfg, err)
	}
	tmp := filepath.Join(base, "next")
	if err := os.Symlink(filepath.Join(base, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	if cfg, changed, err := l.Load(); err != nil || !changed || cfg.Domains()[0] != "v2" {
		t.Fatalf("after the swap: %v %v %v", cfg, changed, err)
	}
}
