package envoy

import (
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const usageYAML = `
domain: api
descriptors:
  - key: model
    rate_limit: {usage: true, unit: minute, requests_per_unit: 1000}
  - key: fast
    rate_limit: {usage: true, unit: second, requests_per_unit: 100}
  - key: quiet
    shadow_mode: true
    rate_limit: {usage: true, unit: minute, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// hits returns descriptor k=v with hits_addend n: 0 is a check.
func hits(k, v string, n uint64) *rlpb.RateLimitDescriptor {
	x := d(k, v)
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

func until(a answer, i int) time.Duration { return a.resp.Statuses[i].DurationUntilReset.AsDuration() }

// Usage charged as debt (1000 tokens a minute: one token each 60ms): the
// charge is never refused, a check is OVER_LIMIT until the debt and one
// token are repaid, then OK; a charge beyond the bound (one bucket owed)
// is forgiven, not an error.
func TestUsageDebt(t *testing.T) {
	clk := newClock()
	s := newTestService(t, ServiceConfig{Store: core.NewMemoryStore(core.WithClock(clk.now))}, usageYAML)
	if a := ask(t, s, req(hits("model", "m", 0))); a.code != ok || a.remaining[0] != 1000 {
		t.Fatalf("first check: %v %v, want OK with 1000", a.code, a.remaining)
	}
	a := ask(t, s, req(hits("model", "m", 1500)))
	if a.code != ok || a.codes[0] != ok || a.remaining[0] != 0 || until(a, 0) != 90*time.Second {
		t.Fatalf("charge 1500: %v %v %v until %v, want OK, 0 left, full in 90s (1500 tokens)", a.code, a.codes, a.remaining, until(a, 0))
	}
	a = ask(t, s, req(hits("model", "m", 0)))
	if a.code != over || a.codes[0] != over || a.remaining[0] != 0 || until(a, 0) != 30060*time.Millisecond {
		t.Fatalf("check in debt: %v %v until %v, want OVER_LIMIT, 0 left, until 30.06s (500 owed + 1)", a.code, a.remaining, until(a, 0))
	}
	clk.add(30 * time.Second) // 500 repaid: 0 tokens, not one
	if a := ask(t, s, req(hits("model", "m", 0))); a.code != over || until(a, 0) != 60*time.Millisecond {
		t.Fatalf("debt repaid, no token yet: %v until %v, want OVER_LIMIT until 60ms", a.code, until(a, 0))
	}
	clk.add(60 * time.Millisecond)
	if a := ask(t, s, req(hits("model", "m", 0))); a.code != ok || a.remaining[0] != 1 {
		t.Fatalf("after the refill: %v %v, want OK with 1", a.code, a.remaining)
	}
	// Far beyond the bound: the bucket owes one burst, the rest is forgiven.
	if a := ask(t, s, req(hits("model", "m", 1<<40))); a.code != ok || a.remaining[0] != 0 || until(a, 0) != 2*time.Minute {
		t.Fatalf("charge 2^40: %v %v until %v, want OK, 0 left, full in 2m (1000 owed)", a.code, a.remaining, until(a, 0))
	}
	if a := ask(t, s, req(hits("model", "m", 0))); a.code != over || until(a, 0) != 60060*time.Millisecond {
		t.Fatalf("check after 2^40: %v until %v, want OVER_LIMIT until 60.06s (1000 owed + 1)", a.code, until(a, 0))
	}
}

// The same on real Redis, on its clock: 100 tokens a second (10ms each).
func TestUsageDebtRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newTestService(t, ServiceConfig{Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))}, usageYAML)
	if a := ask(t, s, req(hits("fast", "m", 150))); a.code != ok || a.remaining[0] != 0 {
		t.Fatalf("charge 150: %v %v, want OK with 0 left", a.code, a.remaining)
	}
	a := ask(t, s, req(hits("fast", "m", 0)))
	if w := until(a, 0); a.code != over || a.remaining[0] != 0 || w <= 0 || w > 510*time.Millisecond {
		t.Fatalf("check in debt: %v %v until %v, want OVER_LIMIT, 0 left, until at most 510ms (50 owed + 1)", a.code, a.remaining, w)
	}
	time.Sleep(until(a, 0))
	if a := ask(t, s, req(hits("fast", "m", 0))); a.code != ok {
		t.Fatalf("after duration_until_reset: %v, want OK", a.code)
	}
	if a := ask(t, s, req(hits("fast", "m", 1<<40))); a.code != ok || a.remaining[0] != 0 {
		t.Fatalf("charge 2^40: %v %v, want OK (forgiven beyond the bound)", a.code, a.remaining)
	}
	a = ask(t, s, req(hits("fast", "m", 0)))
	if w := until(a, 0); a.code != over || w <= 0 || w > 1010*time.Millisecond {
		t.Fatalf("check after 2^40: %v until %v, want OVER_LIMIT until at most 1.01s (100 owed + 1)", a.code, w)
	}
	time.Sleep(until(a, 0))
	if a := ask(t, s, req(hits("fast", "m", 0))); a.code != ok {
		t.Fatalf("after duration_until_reset: %v, want OK", a.code)
	}
}

// A request mixing usage and request limits is all or nothing: usage is
// charged only when the request is admitted, and a check of a usage limit
// in debt refuses the request, giving back what the others took.
func TestUsageAllOrNothing(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, usageYAML)
	ask(t, s, req(d("tight", "x"))) // spent
	a := ask(t, s, req(hits("model", "m", 700), d("tight", "x")))
	if a.code != over || a.codes[0] != ok || a.remaining[0] != 1000 || a.codes[1] != over {
		t.Fatalf("refused request: %v %v %v, want OVER_LIMIT, usage OK with 1000 (uncharged)", a.code, a.codes, a.remaining)
	}
	if a := ask(t, s, req(hits("model", "m", 0))); a.remaining[0] != 1000 {
		t.Fatalf("usage charged by a refused request: %v left, want 1000", a.remaining)
	}
	a = ask(t, s, req(d("user", "x"), hits("model", "m", 1200)))
	if a.code != ok || a.remaining[0] != 4 || a.remaining[1] != 0 {
		t.Fatalf("admitted request: %v %v, want OK, user 4, usage 0", a.code, a.remaining)
	}
	a = ask(t, s, req(d("user", "x"), hits("model", "m", 0)))
	if a.code != over || a.codes[0] != ok || a.codes[1] != over {
		t.Fatalf("check in debt: %v %v, want OVER_LIMIT by the usage check", a.code, a.codes)
	}
	if a := ask(t, s, req(hits("user", "x", 0))); a.remaining[0] != 4 {
		t.Errorf("user charged by a request the usage check refused: %v left, want 4", a.remaining)
	}
}

// is_negative_hits on a usage limit gives tokens back (an estimate
// charged too high), repaying the debt first; shadow mode, the rule's or
// the service's, reports a check in debt but never refuses for it, and
// charges usage as usual.
func TestUsageGiveBackAndShadow(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, usageYAML)
	ask(t, s, req(hits("model", "m", 1500))) // owes 500
	back := hits("model", "m", 600)
	back.IsNegativeHits = true
	if a := ask(t, s, req(back)); a.code != ok || a.remaining[0] != 100 {
		t.Fatalf("give back 600 of a 500 debt: %v %v, want OK with 100", a.code, a.remaining)
	}

	var events []DescriptorEvent
	s = newTestService(t, ServiceConfig{OnDescriptor: func(e DescriptorEvent) { events = append(events, e) }}, usageYAML)
	ask(t, s, req(hits("quiet", "m", 1500)))
	a := ask(t, s, req(hits("quiet", "m", 0)))
	if a.code != ok || a.codes[0] != ok || a.remaining[0] != 0 || len(events) != 2 || !events[1].Over || !events[1].Shadow {
		t.Fatalf("shadow rule, check in debt: %v %v %v, events %+v; want OK, counted as a shadow refusal", a.code, a.codes, a.remaining, events)
	}

	s = newTestService(t, ServiceConfig{ShadowMode: true}, usageYAML)
	ask(t, s, req(hits("model", "m", 1500)))
	if a := ask(t, s, req(hits("model", "m", 0))); a.code != ok || a.codes[0] != over {
		t.Fatalf("SHADOW_MODE, check in debt: %v %v, want OK overall, the refusal reported", a.code, a.codes)
	}
}
