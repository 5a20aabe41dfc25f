// The example is app.go and main.go. This file is the project's own check
// of the shipped alerting rules against a real Prometheus, through
// internal test helpers: it is not part of what to copy.

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/promtest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// waitLimit bounds each wait for Prometheus: generous, for loaded CI
// machines; the waits usually take seconds.
const waitLimit = 90 * time.Second

// forClause matches the for: of an alerting rule.
var forClause = regexp.MustCompile(`(?m)^(\s+for:) \S+$`)

// A real Prometheus scrapes the app every second and evaluates the
// shipped rules; while the app's Redis is down, RateLimitDecisionsDegraded
// fires. The rules are the shipped ones, but with for: 0s, so that the
// alert fires on its condition alone (rules_test.yml tests the for:).
func TestDegradedAlertFires(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and prometheus")
	}
	promtest.LookPath(t, "prometheus")
	redis.SetLogger(quiet{}) // dial failures while Redis is down are the point
	rules, err := os.ReadFile("../../metrics/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	store := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: store.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	// Timeout 250ms, not 50ms: a decision slowed by a loaded machine must
	// not degrade before the outage.
	h, err := newApp(core.Config{Store: core.NewRedisStore(client), Timeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(h)
	t.Cleanup(app.Close)
	prom := promtest.Start(t, forClause.ReplaceAllString(string(rules), "$1 0s"), app.Listener.Addr().String())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		traffic(ctx, app.URL)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Healthy: the degraded share is recorded, and the alert is silent.
	var share []promtest.Sample
	wait(t, prom, "api's degraded share recorded", func() bool {
		share, err = prom.Query(ctx, `policy:ratelimit_decisions_degraded:ratio_rate5m{policy="api"}`)
		return err == nil && len(share) == 1
	})
	if a := alert(t, prom, "RateLimitDecisionsDegraded"); a != nil {
		t.Fatalf("before the outage, degraded share %v: %s is %s", share[0].Value, a.Labels["alertname"], a.State)
	}
	t.Logf("before the outage: api's degraded share %v, RateLimitDecisionsDegraded silent", share[0].Value)

	store.Kill()
	stopped := time.Now()
	var fired *promtest.Alert
	wait(t, prom, "RateLimitDecisionsDegraded firing", func() bool {
		fired = alert(t, prom, "RateLimitDecisionsDegraded")
		return fired != nil && fired.State == "firing"
	})
	t.Logf("RateLimitDecisionsDegraded firing %v after Redis stopped: %s", time.Since(stopped).Round(100*time.Millisecond), fired.Annotations["summary"])
	alerts, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		t.Logf("alert %s{policy=%q} %s, value %s", a.Labels["alertname"], a.Labels["policy"], a.State, a.Value)
	}

	// Every query of the dashboard has data from the real scrape.
	d, err := promtest.ReadDashboard("../../metrics/grafana/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range d.Queries() {
		if q.Where == `annotation "Rate-limit alerts"` {
			continue // ALERTS, Prometheus's own
		}
		s, err := prom.Query(ctx, promtest.PromQL(q.Expr, "15s"))
		if err != nil {
			t.Errorf("dashboard %s: %v", q.Where, err)
		} else if len(s) == 0 {
			t.Errorf("dashboard %s: no data for %s", q.Where, q.Expr)
		}
	}
}

// traffic requests the app's routes every 10ms until ctx is done.
func traffic(ctx context.Context, base string) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, path := range []string{"/api/hello", "/search", "/export"} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// alert returns the pending or firing alert name of policy api, or nil.
func alert(t *testing.T, prom *promtest.Server, name string) *promtest.Alert {
	t.Helper()
	alerts, err := prom.Alerts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Labels["alertname"] == name && a.Labels["policy"] == "api" {
			return &a
		}
	}
	return nil
}

// quiet is a go-redis logger that discards.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// wait polls cond until it holds, failing t after waitLimit with prom's
// alerts.
func wait(t *testing.T, prom *promtest.Server, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			alerts, err := prom.Alerts(context.Background())
			t.Fatalf("no %s within %v; alerts %+v (%v)", what, waitLimit, alerts, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
