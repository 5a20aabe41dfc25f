package envoy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// aliasBomb is a config of nested aliases: each level lists the one
// below nine times, so 3.7 KB would expand to 9^9 descriptors.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &l0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  - &l%d {key: k%d, descriptors: [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]}\n")
	}
	return b.String()
}

func TestAliasBombRefused(t *testing.T) {
	bomb := aliasBomb(42)
	t.Logf("bomb: %d bytes", len(bomb))
	_, err := ParseConfig([]File{{Name: "bomb.yaml", Data: []byte(bomb)}}, ConfigOptions{})
	if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "aliases expand") || !strings.Contains(err.Error(), "bomb.yaml") {
		t.Fatalf("err = %v, want the bomb refused by name", err)
	}
	// Aliases within the bound still work, as in the reference.
	ok := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 2}\n  - key: b\n    rate_limit: *r\n"
	c, err := ParseConfig([]File{{Name: "ok.yaml", Data: []byte(ok)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c.match("d", []entry{{"b", "x"}}); r == nil || r.RequestsPerUnit != 2 {
		t.Errorf("aliased rate_limit: %+v", r)
	}
}

func TestLoaderRefusesLargeFile(t *testing.T) {
	dir := t.TempDir()
	big := "domain: big\n# " + strings.Repeat("x", maxFileBytes) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	l := &Loader{Dir: dir}
	if _, _, err := l.Load(); !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "big.yaml: larger than 4 MiB") {
		t.Errorf("err = %v, want big.yaml refused for its size", err)
	}
}

// A file rewritten in place is read, for a moment, as its prefix: a valid
// but smaller config. A load that removes rules waits for the next read.
func TestLoaderWaitsOnShrink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	full := "domain: a\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	prefix := full[:strings.Index(full, "  - key: y")]
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(full)
	l := &Loader{Dir: dir}
	if _, changed, err := l.Load(); err != nil || !changed {
		t.Fatalf("first load: %v %v", changed, err)
	}
	write(prefix) // caught half-written
	if cfg, changed, err := l.Load(); err != nil || changed {
		t.Fatalf("prefix read once: %v %v %v, want it held back", cfg, changed, err)
	}
	write(full) // the writer finished: the prefix was never served
	if _, changed, err := l.Load(); err != nil || changed {
		t.Fatalf("full again: changed=%v err=%v, want no change", changed, err)
	}
	write(prefix) // a real removal: read twice, then loaded
	l.Load()
	cfg, changed, err := l.Load()
	if err != nil || !changed {
		t.Fatalf("prefix read twice: %v %v", changed, err)
	}
	if r, _ := cfg.match("a", []entry{{"y", "1"}}); r != nil {
		t.Error("the removed rule is still there")
	}
	// Growth needs no second read.
	write(full)
	if _, changed, err := l.Load(); err != nil || !changed {
		t.Errorf("growth: %v %v", changed, err)
	}
}

func TestDuplicateDomainNamesBothFiles(t *testing.T) {
	_, err := ParseConfig([]File{{Name: "a.yaml", Data: []byte("domain: d\n")}, {Name: "b.yaml", Data: []byte("domain: d\n")}}, ConfigOptions{})
	if err == nil || !strings.Contains(err.Error(), "b.yaml: duplicate domain 'd' in config file (first in a.yaml)") {
		t.Errorf("err = %v", err)
	}
}

func TestConfigString(t *testing.T) {
	y := "domain: d\ndescriptors:\n  - key: k\n    value: v\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: u\n    rate_limit: {unlimited: true}\n"
	c, err := ParseConfig([]File{{Name: "a.yaml", Data: []byte(y)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "d.k_v: unit=MINUTE requests_per_unit=10, shadow_mode: true, quota_mode: false\n" +
		"d.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false, unlimited=true\n"
	if got := c.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
