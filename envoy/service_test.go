package envoy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const serviceYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: internal
    rate_limit: {unlimited: true}
  - key: old
    rate_limit: {name: old, unit: minute, requests_per_unit: 1}
  - key: new
    rate_limit: {name: new, replaces: [{name: old}], unit: minute, requests_per_unit: 10}
  - key: six
    rate_limit: {unit: second, unit_multiplier: 6, requests_per_unit: 3}
`

// clock is a settable clock for MemoryStore.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func d(kv ...string) *rlpb.RateLimitDescriptor {
	out := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func req(ds ...*rlpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "api", Descriptors: ds}
}

func newTestService(t *testing.T, cfg ServiceConfig, yaml string) *Service {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = core.NewMemoryStore(core.WithClock(newClock().now))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	s, err := NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig([]File{{"api.yaml", []byte(yaml)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(c)
	return s
}

type answer struct {
	code      rlspb.RateLimitResponse_Code
	codes     []rlspb.RateLimitResponse_Code
	remaining []uint32
	resp      *rlspb.RateLimitResponse
}

func ask(t *testing.T, s *Service, r *rlspb.RateLimitRequest) answer {
	t.Helper()
	resp, err := s.ShouldRateLimit(t.Context(), r)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	a := answer{code: resp.OverallCode, resp: resp}
	for _, st := range resp.Statuses {
		a.codes = append(a.codes, st.Code)
		a.remaining = append(a.remaining, st.LimitRemaining)
	}
	return a
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

func TestTokenBucket(t *testing.T) {
	clk := newClock()
	s := newTestService(t, ServiceConfig{Store: core.NewMemoryStore(core.WithClock(clk.now))}, serviceYAML)
	for i := 4; i >= 0; i-- {
		a := ask(t, s, req(d("user", "u1")))
		if a.code != ok || a.remaining[0] != uint32(i) {
			t.Fatalf("request %d: %v remaining %v", 5-i, a.code, a.remaining)
		}
	}
	a := ask(t, s, req(d("user", "u1")))
	st := a.resp.Statuses[0]
	if a.code != over || st.Code != over || st.DurationUntilReset.AsDuration() != 12*time.Second {
		t.Fatalf("6th: %v %v until %v, want OVER_LIMIT until 12s (one token of 5/min)", a.code, st.Code, st.DurationUntilReset.AsDuration())
	}
	if st.CurrentLimit.RequestsPerUnit != 5 || st.CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit %v", st.CurrentLimit)
	}
	// A token bucket: one token back after 12s, not five at a window edge.
	clk.add(12 * time.Second)
	if a := ask(t, s, req(d("user", "u1"))); a.code != ok || a.remaining[0] != 0 {
		t.Errorf("after 12s: %v %v, want OK with 0 left", a.code, a.remaining)
	}
	if a := ask(t, s, req(d("user", "u1"))); a.code != over {
		t.Errorf("then: %v, want OVER_LIMIT", a.code)
	}
	// Allowed: duration_until_reset is until the bucket is full.
	if a := ask(t, s, req(d("user", "u2"))); a.resp.Statuses[0].DurationUntilReset.AsDuration() != 12*time.Second {
		t.Errorf("allowed reset %v, want 12s (until full)", a.resp.Statuses[0].DurationUntilReset.AsDuration())
	}
}

func TestAllOrNothing(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	if a := ask(t, s, req(d("user", "u1"), d("tight", "u1"))); a.code != ok || a.remaining[0] != 4 || a.remaining[1] != 0 {
		t.Fatalf("first: %v %v", a.code, a.remaining)
	}
	a := ask(t, s, req(d("user", "u1"), d("tight", "u1")))
	if a.code != over || a.codes[0] != ok || a.codes[1] != over || a.remaining[0] != 4 {
		t.Fatalf("second: %v %v %v, want OVER_LIMIT with user OK keeping 4", a.code, a.codes, a.remaining)
	}
	// The refused request charged nothing: user still has 4.
	if a := ask(t, s, req(d("user", "u1"))); a.remaining[0] != 3 {
		t.Errorf("user after the refused request: %v, want 3 left", a.remaining)
	}
	// Refused first: the later descriptor is reported, not charged.
	a = ask(t, s, req(d("tight", "u1"), d("user", "u1")))
	if a.code != over || a.codes[1] != ok || a.remaining[1] != 3 {
		t.Errorf("tight first: %v %v %v, want user OK with 3", a.code, a.codes, a.remaining)
	}
}

func TestHitsAddend(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	r := req(d("user", "u1"))
	r.HitsAddend = 3
	if a := ask(t, s, r); a.code != ok || a.remaining[0] != 2 {
		t.Fatalf("hits 3: %v %v", a.code, a.remaining)
	}
	// The descriptor's own hits_addend wins over the request's.
	dd := d("user", "u1")
	dd.HitsAddend = wrapperspb.UInt64(2)
	r = req(dd)
	r.HitsAddend = 3
	if a := ask(t, s, r); a.code != ok || a.remaining[0] != 0 {
		t.Fatalf("descriptor hits 2: %v %v", a.code, a.remaining)
	}
	// hits_addend 0 looks without charging: OVER_LIMIT now, as not one hit passes.
	check := d("user", "u1")
	check.HitsAddend = wrapperspb.UInt64(0)
	if a := ask(t, s, req(check)); a.code != over {
		t.Errorf("check on an empty bucket: %v, want OVER_LIMIT", a.code)
	}
	// is_negative_hits gives back.
	back := d("user", "u1")
	back.HitsAddend = wrapperspb.UInt64(2)
	back.IsNegativeHits = true
	if a := ask(t, s, req(back)); a.code != ok || a.remaining[0] != 2 {
		t.Errorf("give back 2: %v %v", a.code, a.remaining)
	}
	if a := ask(t, s, req(check)); a.code != ok || a.remaining[0] != 2 {
		t.Errorf("check after: %v %v, want OK with 2 (nothing taken)", a.code, a.remaining)
	}
	// More hits than the bucket holds: never allowed, and nothing charged.
	big := d("user", "u1")
	big.HitsAddend = wrapperspb.UInt64(6)
	if a := ask(t, s, req(big)); a.code != over {
		t.Errorf("hits above the burst: %v", a.code)
	}
}

func TestOverrideKeepsSpent(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	r := req(d("user", "u1"))
	r.HitsAddend = 5
	ask(t, s, r) // 5 of 5 spent
	o := d("user", "u1")
	o.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 8, Unit: typepb.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)}
	a := ask(t, s, req(o))
	// Raised to 8: 3 of headroom, one of which this request takes.
	if a.code != ok || a.remaining[0] != 2 {
		t.Fatalf("override: %v %v, want OK with 2 left", a.code, a.remaining)
	}
	cl := a.resp.Statuses[0].CurrentLimit
	if cl.RequestsPerUnit != 8 || cl.GetUnitMultiplier().GetValue() != 2 {
		t.Errorf("current_limit %v: want 8 per minute × 2 echoed", cl)
	}
}

func TestReplacesShadowUnlimitedBlocked(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	// old (1/min) is replaced by new when both match.
	for i := 0; i < 3; i++ {
		if a := ask(t, s, req(d("old", "x"), d("new", "x"))); a.code != ok || a.resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("replaces, request %d: %v %v", i+1, a.code, a.resp.Statuses[0])
		}
	}
	// shadow_mode on a rule: its refusal never refuses the request, and says OK.
	for i := 0; i < 3; i++ {
		if a := ask(t, s, req(d("shadow", "x"), d("user", "sh"))); a.code != ok || a.codes[0] != ok {
			t.Fatalf("shadow, request %d: %v %v", i+1, a.code, a.codes)
		}
	}
	if a := ask(t, s, req(d("user", "sh"))); a.remaining[0] != 1 {
		t.Errorf("user charged beside a shadow refusal: %v left, want 1", a.remaining)
	}
	if a := ask(t, s, req(d("internal", "x"))); a.code != ok || a.remaining[0] != 1<<32-1 {
		t.Errorf("unlimited: %v %v", a.code, a.remaining)
	}
	if a := ask(t, s, req(d("blocked", "x"))); a.code != over || a.resp.Statuses[0].CurrentLimit.RequestsPerUnit != 0 {
		t.Errorf("requests_per_unit 0: %v", a.code)
	}
	if a := ask(t, s, req(d("nothing", "x"))); a.code != ok || a.resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("no rule: %v", a.code)
	}
	a := ask(t, s, req(d("six", "x")))
	if cl := a.resp.Statuses[0].CurrentLimit; cl.GetUnitMultiplier().GetValue() != 6 || a.resp.Statuses[0].DurationUntilReset.AsDuration() != 2*time.Second {
		t.Errorf("unit_multiplier: %v until %v, want ×6 echoed, 2s (3 per 6s)", cl, a.resp.Statuses[0].DurationUntilReset.AsDuration())
	}
}

func TestGlobalShadowMode(t *testing.T) {
	s := newTestService(t, ServiceConfig{ShadowMode: true, Headers: &Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}}, serviceYAML)
	ask(t, s, req(d("tight", "x")))
	a := ask(t, s, req(d("user", "x"), d("tight", "x")))
	if a.code != ok || a.codes[1] != over {
		t.Fatalf("shadow: %v %v, want OK overall with the refusal reported", a.code, a.codes)
	}
	// Decided as usual: the refusal charged nothing.
	if a := ask(t, s, req(d("user", "x"))); a.remaining[0] != 4 {
		t.Errorf("user: %v left, want 4", a.remaining)
	}
	h := a.resp.ResponseHeadersToAdd
	if len(h) != 3 || h[0].Key != "RateLimit-Limit" || h[0].Value != "1" || h[1].Value != "0" || h[2].Value != "60" {
		t.Errorf("headers %v, want the refused descriptor's 1, 0, 60", h)
	}
}

func TestBlockedNeedsNoStore(t *testing.T) {
	s := newTestService(t, ServiceConfig{Store: failingStore}, serviceYAML)
	if a := ask(t, s, req(d("blocked", "x"), d("internal", "y"))); a.code != over || a.codes[1] != ok {
		t.Errorf("got %v %v", a.code, a.codes)
	}
}

// failingStore fails every call.
var failingStore = fakestore.New(func(context.Context, bucket.Ask) (bucket.Outcome, error) {
	return bucket.Outcome{}, errors.New("store down")
})

func TestStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		fm   core.FailMode
		want rlspb.RateLimitResponse_Code
		code codes.Code
	}{
		{0, 0, codes.Unavailable},
		{core.FailOpen, ok, codes.OK},
		{core.FailClosed, over, codes.OK},
	} {
		t.Run(tt.fm.String(), func(t *testing.T) {
			s := newTestService(t, ServiceConfig{Store: failingStore, FailMode: tt.fm}, serviceYAML)
			resp, err := s.ShouldRateLimit(t.Context(), req(d("user", "x")))
			if status.Code(err) != tt.code || (err == nil && resp.OverallCode != tt.want) {
				t.Errorf("got %v %v, want %v %v", resp.GetOverallCode(), err, tt.want, tt.code)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	if _, err := s.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{d("user", "x")}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no domain: %v", err)
	}
	if _, err := s.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "api"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v", err)
	}
}

// stalledStore answers nothing until the decision's deadline, counting calls.
func stalledStore(calls *atomic.Int64) core.Store {
	return fakestore.New(func(ctx context.Context, _ bucket.Ask) (bucket.Outcome, error) {
		calls.Add(1)
		<-ctx.Done()
		return bucket.Outcome{}, ctx.Err()
	})
}

// Concurrent two-descriptor requests: at most the tighter limit admitted,
// and once all are answered the wider bucket holds exactly what the
// admitted ones took — the refused ones charged nothing. On the memory
// store and on real Redis (one script call per request).
func TestAllOrNothingConcurrent(t *testing.T) {
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			cfg := ServiceConfig{}
			if name == "redis" {
				c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				cfg.Store = core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t)))
			}
			s := newTestService(t, cfg, serviceYAML)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					resp, err := s.ShouldRateLimit(context.Background(), req(d("user", "c"), d("tight", "c")))
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == ok {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 1 {
				t.Fatalf("admitted %d, want 1 (tight: 1 per minute)", n)
			}
			check := d("user", "c")
			check.HitsAddend = wrapperspb.UInt64(0)
			if a := ask(t, s, req(check)); a.remaining[0] != 4 {
				t.Errorf("user bucket holds %d, want 4: only the admitted request took a token", a.remaining[0])
			}
		})
	}
}
