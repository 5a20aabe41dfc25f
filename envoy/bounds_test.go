package envoy

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/fakestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// countingStore allows everything, with 4 tokens left, as a store outside
// the process, counting its calls.
func countingStore(calls *atomic.Int64) core.Store {
	return fakestore.New(func(_ context.Context, c bucket.Ask) (bucket.Outcome, error) {
		calls.Add(1)
		for i := range c.Each {
			c.Each[i] = bucket.Outcome{Allowed: true, Remaining: 4, ResetAfter: time.Second}
		}
		return bucket.Outcome{Allowed: true, Remaining: 4, ResetAfter: time.Second}, nil
	})
}

// A request's descriptors are capped: 1 000 are refused before anything
// is asked; 256 (the cap) are one store call.
func TestDescriptorsCapped(t *testing.T) {
	var calls atomic.Int64
	s := newTestService(t, ServiceConfig{Store: countingStore(&calls)}, serviceYAML)
	many := func(n int) *rlspb.RateLimitRequest {
		r := req()
		for i := range n {
			r.Descriptors = append(r.Descriptors, d("user", strconv.Itoa(i)))
		}
		return r
	}
	if _, err := s.ShouldRateLimit(t.Context(), many(1000)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("1000 descriptors: %v, want InvalidArgument", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("1000 descriptors refused, yet %d store calls", n)
	}
	a := ask(t, s, many(maxDescriptors))
	if a.code != ok || len(a.codes) != maxDescriptors || a.remaining[maxDescriptors-1] != 4 {
		t.Fatalf("%d descriptors: %v, %d statuses, last remaining %d", maxDescriptors, a.code, len(a.codes), a.remaining[maxDescriptors-1])
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d descriptors: %d store calls, want 1", maxDescriptors, n)
	}
}

// A caller gone before the decision decides nothing: no store call, so
// no bucket written.
func TestCallerGoneDecidesNothing(t *testing.T) {
	var calls atomic.Int64
	s := newTestService(t, ServiceConfig{Store: countingStore(&calls)}, serviceYAML)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	back := hits("user", "u", 2)
	back.IsNegativeHits = true
	r := req(d("user", "u"), d("tight", "u"), back, hits("six", "u", 0))
	if _, err := s.ShouldRateLimit(ctx, r); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled caller: %v, want Canceled", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("cancelled caller: %d store calls, want 0", n)
	}
}

// countingObserver counts the policy names it sees.
type countingObserver struct {
	mu    sync.Mutex
	names map[string]bool
}

func (o *countingObserver) Decision(e core.DecisionEvent) {
	o.mu.Lock()
	o.names[e.Policy] = true
	o.mu.Unlock()
}
func (o *countingObserver) BreakerChange(string, bool) {}

// Descriptors carrying their own limit, each with other keys, values and
// limits, cost bounded memory: no limiter is made for them, and the
// policy names and statistics keys they bring are one per domain.
func TestOwnLimitsBounded(t *testing.T) {
	obs := &countingObserver{names: map[string]bool{}}
	keys := map[string]bool{}
	s := newTestService(t, ServiceConfig{Observer: obs, OnDescriptor: func(e DescriptorEvent) { keys[e.Key] = true }}, serviceYAML)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			o := d("k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
			o.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(10 + i), Unit: typepb.RateLimitUnit_MINUTE}
			if a := ask(t, s, req(o)); a.code != ok || a.remaining[0] != uint32(9+i) {
				t.Fatalf("own limit %d: %v %v", i, a.code, a.remaining)
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	send(0, 1500)
	before := heap()
	send(1500, 6000)
	grew := int64(heap()) - int64(before)
	if len(obs.names) != 1 || len(keys) != 1 {
		t.Errorf("6000 own limits: policy names %v, statistics keys %v; want 1, 1", obs.names, keys)
	}
	// A limiter each would be about 5 KB a request (22 MB here).
	if grew > 4<<20 {
		t.Errorf("heap grew %d KB over 4500 requests of their own limits, want bounded", grew>>10)
	}
}

// Any valid request gets an answer: hits given back above the burst give
// back up to the burst; a cost above the burst, or a rule that always
// refuses, is OVER_LIMIT with a duration_until_reset that is not 0.
func TestLargeCosts(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, serviceYAML)
	r := req(d("user", "u"))
	r.HitsAddend = 5
	ask(t, s, r) // 5 of 5 spent
	back := hits("user", "u", 100)
	back.IsNegativeHits = true
	if a := ask(t, s, req(back)); a.code != ok || a.remaining[0] != 5 {
		t.Fatalf("give back 100 on a burst of 5: %v %v, want OK with 5", a.code, a.remaining)
	}
	a := ask(t, s, req(hits("user", "u", 6), d("tight", "u")))
	if a.code != over || a.codes[0] != over || until(a, 0) <= 0 {
		t.Fatalf("cost 6 on a burst of 5: %v %v until %v, want OVER_LIMIT, not 0", a.code, a.codes, until(a, 0))
	}
	if a := ask(t, s, req(d("tight", "u"))); a.code != ok {
		t.Fatalf("tight after the refused request: %v, want OK (nothing taken)", a.code)
	}
	if a := ask(t, s, req(d("blocked", "u"))); a.code != over || until(a, 0) != time.Minute {
		t.Fatalf("requests_per_unit 0: %v until %v, want OVER_LIMIT until 1m", a.code, until(a, 0))
	}
}

// With the store stalled, a request of several descriptors costs one
// Timeout in every FailMode: one store call, decided by the FailMode.
func TestStalledOneCallEveryMode(t *testing.T) {
	for _, fm := range []core.FailMode{0, core.FailOpen, core.FailClosed, core.FailLocal} {
		t.Run(fmt.Sprint(fm), func(t *testing.T) {
			var calls atomic.Int64
			s := newTestService(t, ServiceConfig{Store: stalledStore(&calls), FailMode: fm, Instances: 1, Timeout: 20 * time.Millisecond}, serviceYAML)
			_, err := s.ShouldRateLimit(t.Context(), req(d("user", "x"), d("tight", "x"), d("six", "x"), hits("user", "y", 0)))
			if (fm == 0) != (status.Code(err) == codes.Unavailable) {
				t.Errorf("err %v", err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("store asked %d times, want once", n)
			}
		})
	}
}

// A usage charge on a limit whose rate shares no factor with its period
// is OK however large (no Internal error).
func TestUsageChargeAnySize(t *testing.T) {
	s := newTestService(t, ServiceConfig{}, `
domain: api
descriptors:
  - key: odd
    rate_limit: {usage: true, unit: day, requests_per_unit: 100001}
`)
	for _, n := range []uint64{60000, 100001, 1 << 40} {
		if a := ask(t, s, req(hits("odd", "k", n))); a.code != ok {
			t.Fatalf("charge %d: %v", n, a.code)
		}
	}
}

// Every rule is decided through one limiter's guard: with the store
// stalled, the breaker that the first rules' failed calls open spares the
// store the calls of the next rules (a limiter per rule had a breaker
// each: one failed call per rule).
func TestRulesShareOneGuard(t *testing.T) {
	var calls atomic.Int64
	var yaml strings.Builder
	yaml.WriteString("domain: api\ndescriptors:\n")
	const rules = 8
	for i := range rules {
		fmt.Fprintf(&yaml, "  - key: r%d\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", i)
	}
	s := newTestService(t, ServiceConfig{Store: stalledStore(&calls), FailMode: core.FailOpen, Timeout: 20 * time.Millisecond}, yaml.String())
	for i := range rules {
		if a := ask(t, s, req(d("r"+strconv.Itoa(i), "x"))); a.code != ok {
			t.Fatalf("rule r%d with the store stalled, FailOpen: %v", i, a.code)
		}
	}
	// core.DefaultBreakerFailures calls open the breaker; a probe follows
	// each BreakerCooldown (500ms), which these requests take far less than.
	if n := calls.Load(); n >= rules {
		t.Errorf("%d rules, store stalled: %d store calls, want fewer (one breaker)", rules, n)
	}
}
