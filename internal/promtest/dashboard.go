package promtest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Query is a PromQL expression of a Grafana dashboard.
type Query struct {
	Where string // "panel \"Title\" target A", "annotation \"Name\"" or "variable name"
	Expr  string // as written, with the dashboard's $variables
}

// Dashboard is the part of a Grafana dashboard's JSON that queries
// Prometheus.
type Dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []Panel `json:"panels"`

	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or an object in newer Grafana
		} `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; a row holds panels of its own when
// collapsed.
type Panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []Panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
}

// ReadDashboard reads the dashboard JSON file at path.
func ReadDashboard(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("promtest: %s: %w", path, err)
	}
	return &d, nil
}

// AllPanels returns the dashboard's panels, those inside rows included.
func (d *Dashboard) AllPanels() []Panel {
	var all []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

// labelValues matches a query variable's label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// Queries returns every PromQL expression of the dashboard: each panel
// target's, each annotation's, and the series selector of each query
// variable's label_values(selector, label).
func (d *Dashboard) Queries() []Query {
	var qs []Query
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			qs = append(qs, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
		}
	}
	for _, a := range d.Annotations.List {
		qs = append(qs, Query{Where: fmt.Sprintf("annotation %q", a.Name), Expr: a.Expr})
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		qs = append(qs, Query{Where: "variable " + v.Name, Expr: q})
	}
	return qs
}

// PromQL returns expr with Grafana's $__rate_interval and $__interval set
// to rateInterval and every other $variable (or ${variable}) to ".*", as
// a dashboard showing all values queries.
func PromQL(expr, rateInterval string) string {
	expr = strings.NewReplacer("$__rate_interval", rateInterval, "${__rate_interval}", rateInterval,
		"$__interval", rateInterval, "${__interval}", rateInterval).Replace(expr)
	return variable.ReplaceAllString(expr, ".*")
}

var variable = regexp.MustCompile(`\$\{\w+\}|\$\w+`)
