package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestDemo runs the demo's core function briefly and checks what it
// claims: the shared limit lets through no more than burst + rate × time,
// and about what it should; per-instance memory limits let through about
// instances × as many.
func TestDemo(t *testing.T) {
	t.Parallel()
	o := options{instances: 3, limit: 4, rate: 24, duration: 1500 * time.Millisecond, addr: "127.0.0.1:0", timeout: 2 * time.Second}
	var out bytes.Buffer
	rep, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkReport(t, o, rep)
	text := out.String()
	for _, want := range []string{
		"embedded Redis (miniredis)",
		"ONE limit, shared in Redis",
		"HTTP/1.1 429 Too Many Requests",
		"Ratelimit-Limit: 4",
		"Ratelimit-Remaining: 0",
		"Retry-After: 1",
		`"status":429`,
		"Done.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.ContainsAny(text, "\r\x1b") {
		t.Errorf("output without a TTY holds control codes:\n%q", text)
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// TestDemoRealRedis is TestDemo with the Redis at REDIS_ADDR (default
// 127.0.0.1:6379), under a key prefix of its own. It skips when none
// answers, unless RATELIMIT_REQUIRE_REDIS=1.
func TestDemoRealRedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	t.Cleanup(deleteRunKeys(t, addr, time.Now()))
	o := options{redisAddr: addr, instances: 3, limit: 4, rate: 24, duration: 1500 * time.Millisecond, addr: "127.0.0.1:0", timeout: 2 * time.Second}
	var out bytes.Buffer
	rep, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkReport(t, o, rep)
	if !strings.Contains(out.String(), "Redis at "+addr+" (-redis)") {
		t.Errorf("output does not name the Redis at %s:\n%s", addr, out.String())
	}
}

// deleteRunKeys returns a cleanup that deletes the keys of the demo runs
// that started at addr since start: their prefix is "ratelimit-demo:"
// and the start's UnixNano in base 36.
func deleteRunKeys(t *testing.T, addr string, start time.Time) func() {
	return func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, "ratelimit-demo:*", 1000).Iterator()
		for iter.Next(ctx) {
			run, _, _ := strings.Cut(strings.TrimPrefix(iter.Val(), "ratelimit-demo:"), ":")
			if ns, err := strconv.ParseInt(run, 36, 64); err == nil && ns >= start.UnixNano() {
				c.Del(ctx, iter.Val())
			}
		}
		if err := iter.Err(); err != nil {
			t.Logf("deleting the demo's keys: %v", err)
		}
	}
}

func checkReport(t *testing.T, o options, r *report) {
	t.Helper()
	if want := int(o.duration * time.Duration(o.rate) / time.Second); r.sent != want {
		t.Errorf("sent %d, want %d", r.sent, want)
	}
	if r.shared > r.bound {
		t.Errorf("shared limit let through %d, more than its bound %d", r.shared, r.bound)
	}
	// Not much less either, though a busy machine delays requests (and
	// a decision that timed out may still have taken its token).
	if r.shared < o.limit {
		t.Errorf("shared limit let through %d, less than its burst %d (bound %d, degraded %d)", r.shared, o.limit, r.bound, r.degraded)
	}
	cumulative := 0
	for _, s := range r.seconds {
		for _, x := range s.shared {
			cumulative += x
		}
		if cumulative > s.bound {
			t.Errorf("by %v the shared limit let through %d, more than %d", s.to, cumulative, s.bound)
		}
	}
	if r.local > o.instances*r.bound {
		t.Errorf("memory limits let through %d, more than %d instances × the bound %d", r.local, o.instances, r.bound)
	}
	// Each instance receives rate/instances a second, more than the limit:
	// its own bucket lets through about the whole limit, so all of them
	// about instances × the shared total. That needs the requests on time:
	// on a machine too busy to keep the schedule, buckets refill between
	// late requests and the ratio means little.
	ratio := float64(r.local) / float64(r.shared)
	if late := r.elapsed - o.duration; late > o.duration/4 {
		t.Logf("requests ran %v late; not checking the memory/shared ratio %.2f", late, ratio)
		return
	}
	// On schedule the client asks for more than the limit all along, so the
	// shared bucket lets through nearly its whole bound: it refills in real
	// time, on miniredis too (its TIME is the wall clock unless SetTime).
	if min := r.bound - 2 - int(r.degraded); r.shared < min {
		t.Errorf("shared limit let through %d, want at least %d of its bound %d (degraded %d)", r.shared, min, r.bound, r.degraded)
	}
	if ratio < float64(o.instances)*0.75 {
		t.Errorf("memory limits let through %d, %.2f× the shared %d; want about %d×", r.local, ratio, r.shared, o.instances)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	ok := options{instances: 3, limit: 10, rate: 50, duration: time.Second}
	tests := []struct {
		name string
		edit func(*options)
	}{
		{"no instances", func(o *options) { o.instances = 0 }},
		{"ten instances", func(o *options) { o.instances = 10 }},
		{"zero limit", func(o *options) { o.limit = 0 }},
		{"zero rate", func(o *options) { o.rate = 0 }},
		{"negative duration", func(o *options) { o.duration = -time.Second }},
		{"no run without serve", func(o *options) { o.duration = 0 }},
	}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tt := range tests {
		o := ok
		tt.edit(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}
