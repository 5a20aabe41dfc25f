package metrics_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/promtest"
	"github.com/sluicehq/ratelimit/metrics"
)

// The files the package ships for operators.
const (
	rulesFile     = "prometheus/rules.yml"
	rulesTestFile = "prometheus/rules_test.yml"
	dashboardFile = "grafana/dashboard.json"
)

// TestRulesPromtool checks the rules and runs their unit tests with
// promtool: every alert on synthetic series, firing and not.
func TestRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool := promtest.LookPath(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestDashboardPromQL has promtool parse every query of the dashboard, each
// made a recording rule with Grafana's variables filled in.
func TestDashboardPromQL(t *testing.T) {
	t.Parallel()
	promtool := promtest.LookPath(t, "promtool")
	d := readDashboard(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := d.Queries()
	for i, q := range queries {
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: %q\n", i, promtest.PromQL(q.Expr, "5m"))
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		for i, q := range queries {
			t.Logf("dashboard_query_%d: %s: %s", i, q.Where, q.Expr)
		}
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestDashboard checks the dashboard's structure and that its queries,
// and the words of its descriptions, name only series the package exports
// or the rules record, with label values those series carry.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	ids := map[int]string{}
	for _, p := range d.AllPanels() {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
	}
	known := knownSeries(t)
	queries := d.Queries()
	if len(queries) < 10 {
		t.Fatalf("%d queries, want a dashboard's worth", len(queries))
	}
	for _, q := range queries {
		if q.Expr == "" {
			t.Errorf("%s: empty expr", q.Where)
		}
		known.check(t, q.Where, q.Expr)
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	known.checkNames(t, dashboardFile, string(b))
}

// TestRules checks that the rules, and their annotations' words, name
// only series the package exports or the rules record, that every alert
// tells the operator what it means, and that rules_test.yml tests every
// alert both firing and not.
func TestRules(t *testing.T) {
	t.Parallel()
	known := knownSeries(t)
	text := uncommented(t, rulesFile)
	known.check(t, rulesFile, text)

	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)$`).FindAllStringSubmatchIndex(text, -1)
	if len(alerts) != 6 {
		t.Errorf("%d alerts, want 6", len(alerts))
	}
	firing, quiet := testedAlerts(t)
	for i, m := range alerts {
		name := text[m[2]:m[3]]
		end := len(text)
		if i+1 < len(alerts) {
			end = alerts[i+1][0]
		}
		block := text[m[0]:end]
		for _, want := range []string{"summary:", "description:", "severity:", "for:"} {
			if !strings.Contains(block, want) {
				t.Errorf("alert %s: no %s", name, want)
			}
		}
		if !firing[name] {
			t.Errorf("alert %s: %s has no test where it fires", name, rulesTestFile)
		}
		if !quiet[name] {
			t.Errorf("alert %s: %s has no test where it does not fire", name, rulesTestFile)
		}
	}
}

// testedAlerts returns the alerts that rules_test.yml expects firing at
// some evaluation, and those it expects silent at some evaluation.
func testedAlerts(t *testing.T) (firing, quiet map[string]bool) {
	t.Helper()
	firing, quiet = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)\n\s*exp_alerts:(.*)\n`).FindAllStringSubmatch(uncommented(t, rulesTestFile), -1) {
		if strings.TrimSpace(m[2]) == "[]" {
			quiet[m[1]] = true
		} else {
			firing[m[1]] = true
		}
	}
	return firing, quiet
}

// series is what a query may name: metric names and, by label, values.
type series struct {
	names  map[string]bool
	values map[string]map[string]bool // label → values; only labels with a fixed set
}

// knownSeries returns the series a Collector exports, scraped from a
// registry after one decision of every kind, an HTTP request of every
// outcome and an in-flight limit's slot, and those rules.yml records.
func knownSeries(t *testing.T) series {
	t.Helper()
	c := metrics.New()
	c.Decision(core.DecisionEvent{Policy: "p", Allowed: true, Latency: 1})
	c.BreakerChange("p", true)
	c.HTTPObserver()(nil, core.Result{Name: "p", Allowed: true}, nil, false)
	slots, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "slots", Max: 1, FailMode: core.FailClosed, Observer: c})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := slots.Acquire(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := series{names: map[string]bool{}, values: map[string]map[string]bool{}}
	for _, f := range families {
		s.names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				s.names[f.GetName()+suffix] = true
			}
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "policy" {
					continue // the user's names
				}
				if s.values[lp.GetName()] == nil {
					s.values[lp.GetName()] = map[string]bool{}
				}
				s.values[lp.GetName()][lp.GetValue()] = true
			}
		}
	}
	for _, want := range []string{"outcome", "kind"} {
		if len(s.values[want]) == 0 {
			t.Fatalf("scraped no %s label values", want)
		}
	}
	for _, want := range []string{"ratelimit_inflight_held", "ratelimit_lease_renewals_total", "ratelimit_lease_expiries_total"} {
		if !s.names[want] {
			t.Fatalf("scraped no %s", want)
		}
	}
	rules := uncommented(t, rulesFile)
	for _, m := range regexp.MustCompile(`record: (\S+)`).FindAllStringSubmatch(rules, -1) {
		s.names[m[1]] = true
	}
	s.values["quantile"] = map[string]bool{}
	for _, m := range regexp.MustCompile(`quantile: "([^"]+)"`).FindAllStringSubmatch(rules, -1) {
		s.values["quantile"][m[1]] = true
	}
	return s
}

var (
	// identifier matches PromQL metric names among other words.
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// matcher matches a label matcher with a quoted value.
	matcher = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// checkNames reports every word of text that looks like one of the
// package's series (ratelimit_… or level:ratelimit_…:operation) but is
// neither exported nor recorded.
func (s series) checkNames(t *testing.T, where, text string) {
	t.Helper()
	for _, w := range identifier.FindAllString(text, -1) {
		if (strings.HasPrefix(w, "ratelimit_") || strings.Contains(w, ":ratelimit_")) && !s.names[w] {
			t.Errorf("%s: %s is no series the package exports or the rules record", where, w)
		}
	}
}

// check is checkNames, and checks that each matcher on a label with a
// fixed set of values names (or, for a regular expression, matches) values
// of that set.
func (s series) check(t *testing.T, where, text string) {
	t.Helper()
	s.checkNames(t, where, text)
	for _, m := range matcher.FindAllStringSubmatch(text, -1) {
		label, op, value := m[1], m[2], m[3]
		values := s.values[label]
		if values == nil {
			continue
		}
		if op == "=" || op == "!=" {
			if !values[value] {
				t.Errorf("%s: %s%s%q: no such %s (have %v)", where, label, op, value, label, sorted(values))
			}
			continue
		}
		re, err := regexp.Compile("^(?:" + value + ")$")
		if err != nil {
			t.Errorf("%s: %s%s%q: %v", where, label, op, value, err)
			continue
		}
		for _, alt := range strings.Split(value, "|") {
			if regexp.QuoteMeta(alt) == alt && !values[alt] {
				t.Errorf("%s: %s%s%q: no such %s %q (have %v)", where, label, op, value, label, alt, sorted(values))
			}
		}
		if !slices.ContainsFunc(sorted(values), re.MatchString) {
			t.Errorf("%s: %s%s%q matches no %s (have %v)", where, label, op, value, label, sorted(values))
		}
	}
}

func sorted(set map[string]bool) []string {
	var out []string
	for v := range set {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// uncommented returns the file at path without its comment lines.
func uncommented(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

func readDashboard(t *testing.T) *promtest.Dashboard {
	t.Helper()
	d, err := promtest.ReadDashboard(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
