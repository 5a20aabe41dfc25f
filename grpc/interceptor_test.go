package grpc_test

import (
	"context"
	"errors"

	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

func both(l *core.Limiter, opts ...ratelimit.Option) interceptors {
	return interceptors{ratelimit.UnaryServerInterceptor(l, opts...), ratelimit.StreamServerInterceptor(l, opts...)}
}

// The 4th call in a minute at 3 per minute is ResourceExhausted, with
// RetryInfo and the rate-limit metadata; every call before it carries
// the metadata too.
func TestUnaryRefusal(t *testing.T) {
	t.Parallel()
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(3))))
	calls := wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK, codes.OK, codes.ResourceExhausted)
	for i, want := range []string{"2", "1", "0", "0"} {
		if got := calls[i].get(t, "ratelimit-remaining"); got != want {
			t.Errorf("call %d: ratelimit-remaining %q, want %q", i+1, got, want)
		}
	}
	refused := calls[3]
	for k, want := range map[string]string{
		"ratelimit-limit":  "3",
		"ratelimit-reset":  "20", // a token every 20 s
		"ratelimit-policy": "3;w=60",
	} {
		if got := refused.get(t, k); got != want {
			t.Errorf("refused: %s %q, want %q", k, got, want)
		}
	}
	if d, ok := refused.retryDelay(); !ok || d != 20*time.Second {
		t.Errorf("refused: RetryInfo %v (present %v), want 20s", d, ok)
	}
	if got, want := refused.st.Message(), "rate limit exceeded; retry in 20s"; got != want {
		t.Errorf("refused: message %q, want %q", got, want)
	}
}

// A token comes back after its interval: the refusal lasts no longer than
// the RetryInfo said.
func TestRetryAfterRefill(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	s := serveBoth(t, both(limitertest.NewLimiterClock(t, core.PerMinute(1), clk.Now)))
	c := wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)[1]
	d, _ := c.retryDelay()
	clk.Advance(d - time.Millisecond)
	wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)
	clk.Advance(time.Millisecond)
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)
}

// watch opens Health/Watch and reads its first message; it returns the
// stream, its header metadata and the status of the first Recv.
func watch(t *testing.T, s *server, ctx context.Context) (healthpb.Health_WatchClient, metadata.MD, *status.Status) {
	t.Helper()
	w, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	_, err = w.Recv()
	md, herr := w.Header()
	if herr != nil && err == nil {
		t.Fatalf("Header: %v", herr)
	}
	return w, md, status.Convert(err)
}

// A stream is decided once, when it opens: the messages of an open stream
// spend nothing, and the stream past the limit is refused at its start.
func TestStreamDecidedAtOpen(t *testing.T) {
	t.Parallel()
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(2))))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1, md, st := watch(t, s, ctx)
	if st.Code() != codes.OK || strings.Join(md.Get("ratelimit-remaining"), ",") != "1" {
		t.Fatalf("stream 1: %v, remaining %q; want OK, 1", st, md.Get("ratelimit-remaining"))
	}
	// Many messages on the open stream, each a status change.
	for i := range 10 {
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if i%2 == 1 {
			want = healthpb.HealthCheckResponse_SERVING
		}
		s.health.SetServingStatus("", want)
		m, err := w1.Recv()
		if err != nil || m.Status != want {
			t.Fatalf("stream 1, message %d: %v, %v; want %v", i+2, m, err, want)
		}
	}
	if _, md, st := watch(t, s, ctx); st.Code() != codes.OK || strings.Join(md.Get("ratelimit-remaining"), ",") != "0" {
		t.Fatalf("stream 2: %v, remaining %q; want OK, 0", st, md.Get("ratelimit-remaining"))
	}
	_, md, st = watch(t, s, ctx)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("stream 3: %v, want ResourceExhausted", st)
	}
	if got := md.Get("ratelimit-reset"); len(got) != 1 || got[0] != "30" {
		t.Errorf("stream 3: ratelimit-reset %q, want 30", got)
	}
	if d, ok := (call{st: st}).retryDelay(); !ok || d != 30*time.Second {
		t.Errorf("stream 3: RetryInfo %v (present %v), want 30s", d, ok)
	}
	// Unary calls share the bucket: it is empty.
	wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)
}

// Per-method limits go by full method name; other methods use the
// interceptor's limiter, in buckets of their own.
func TestWithMethods(t *testing.T) {
	t.Parallel()
	clk := limitertest.NewClock()
	store := core.NewMemoryStore(core.WithClock(clk.Now))
	def := limitertest.New(t, core.Config{Store: store, Name: "default", Limit: core.PerMinute(5), FailMode: core.FailOpen})
	strict := limitertest.New(t, core.Config{Store: store, Name: "check", Limit: core.PerMinute(1), FailMode: core.FailOpen})
	s := serveBoth(t, both(def, ratelimit.WithMethods(map[string]*core.Limiter{healthpb.Health_Check_FullMethodName: strict})))
	calls := wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)
	if got := calls[1].get(t, "ratelimit-limit"); got != "1" {
		t.Errorf("Check: ratelimit-limit %q, want 1", got)
	}
	calls = wantCodes(t, func() call { return s.list(t) }, codes.OK, codes.OK)
	if got := calls[1].get(t, "ratelimit-remaining"); got != "3" {
		t.Errorf("List: ratelimit-remaining %q, want 3 (Check's calls spent nothing of it)", got)
	}
	_, md, st := watch(t, s, context.Background())
	if st.Code() != codes.OK || md.Get("ratelimit-remaining")[0] != "2" {
		t.Errorf("Watch: %v, remaining %q; want OK, 2 (the default limiter)", st, md.Get("ratelimit-remaining"))
	}
}

func TestWithMethodsChecked(t *testing.T) {
	t.Parallel()
	lim := limitertest.NewLimiter(t, core.PerMinute(1))
	for _, tc := range []struct{ method, panics string }{
		{"grpc.health.v1.Health/Check", "not a full method name"},
		{"/grpc.health.v1.Health", "not a full method name"},
		{"/grpc.health.v1.Health/", "not a full method name"},
		{"/grpc.health.v1.Health/Check/x", "not a full method name"},
		{"/grpc.health.v1.Health/check", `service grpc.health.v1.Health has no method check (it has Check, List, Watch)`},
		{"/grpc.health.v1.HealthCheckRequest/Check", "is not a service"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.panics) {
					t.Errorf("panic %v, want one saying %q", r, tc.panics)
				}
			}()
			ratelimit.UnaryServerInterceptor(lim, ratelimit.WithMethods(map[string]*core.Limiter{tc.method: lim}))
		})
	}
}

// A service the protobuf registry does not know is logged once, at the
// first call.
func TestWithMethodsUnknownServiceLogged(t *testing.T) {
	t.Parallel()
	var log logBuffer
	lim := limitertest.NewLimiter(t, core.PerMinute(10))
	s := serveBoth(t, both(lim, ratelimit.WithLogger(log.logger()),
		ratelimit.WithMethods(map[string]*core.Limiter{"/grpc.health.v1.Helth/Check": lim, "/acme.Orders/Create": lim})))
	if log.String() != "" {
		t.Fatalf("logged before the first call: %s", log.String())
	}
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK)
	if got := log.String(); strings.Count(got, "protobuf registry does not know") != 1 || !strings.Contains(got, "[acme.Orders grpc.health.v1.Helth]") {
		t.Errorf("log: %s; want one line naming both services", got)
	}
}

// Skipped calls (health checks) spend nothing and carry no metadata.
func TestSkip(t *testing.T) {
	t.Parallel()
	skip := ratelimit.WithSkip(func(_ context.Context, m string) bool { return m == healthpb.Health_Check_FullMethodName })
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), skip))
	for _, c := range wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK, codes.OK) {
		if len(c.md.Get("ratelimit-limit")) != 0 {
			t.Errorf("skipped call has metadata %v", c.md)
		}
	}
	wantCodes(t, func() call { return s.list(t) }, codes.OK, codes.ResourceExhausted)
}

func TestCost(t *testing.T) {
	t.Parallel()
	cost := ratelimit.WithCost(func(_ context.Context, m string) int {
		if m == healthpb.Health_List_FullMethodName {
			return 3
		}
		return 1
	})
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(4)), cost))
	if c := wantCodes(t, func() call { return s.list(t) }, codes.OK)[0]; c.get(t, "ratelimit-remaining") != "1" {
		t.Errorf("List: remaining %q, want 1", c.get(t, "ratelimit-remaining"))
	}
	wantCodes(t, func() call { return s.list(t) }, codes.ResourceExhausted)
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)
}

// A cost the limiter can never allow is the server's bug: Internal,
// observed and logged.
func TestInvalidCost(t *testing.T) {
	t.Parallel()
	var log logBuffer
	var obs observations
	for _, n := range []int{0, 5} {
		s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(4)),
			ratelimit.WithCost(func(context.Context, string) int { return n }), ratelimit.WithLogger(log.logger()), obs.option()))
		c := wantCodes(t, func() call { return s.check(t) }, codes.Internal)[0]
		if c.st.Message() != "rate limit could not be applied" {
			t.Errorf("cost %d: message %q", n, c.st.Message())
		}
	}
	if got := obs.errs(); len(got) != 2 || !errors.Is(got[0], core.ErrInvalidCost) || !errors.Is(got[1], core.ErrCostTooHigh) {
		t.Errorf("observed %v, want ErrInvalidCost, ErrCostTooHigh", got)
	}
	if got := log.String(); strings.Count(got, "kind=cost") != 2 {
		t.Errorf("log: %s; want a kind=cost line per interceptor", got)
	}
}

// Dry-run decides, counts and sends the metadata, but refuses nothing:
// neither a denial nor a key error.
func TestDryRun(t *testing.T) {
	t.Parallel()
	var obs observations
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), ratelimit.WithDryRun(), obs.option(),
		ratelimit.WithKey(ratelimit.Metadata("x-api-key")), ratelimit.WithLogger(limitertest.Quiet)))
	calls := wantCodes(t, func() call { return s.check(t, "x-api-key", "k1") }, codes.OK, codes.OK)
	if got := calls[1].get(t, "ratelimit-remaining"); got != "0" {
		t.Errorf("would-be refusal: remaining %q, want 0", got)
	}
	wantCodes(t, func() call { return s.check(t) }, codes.OK) // no key
	got := obs.all()
	if len(got) != 3 || !got[0].res.Allowed || got[1].res.Allowed || !errors.Is(got[2].err, ratelimit.ErrKey) {
		t.Fatalf("observed %+v; want allowed, refused, key error", got)
	}
	for i, o := range got {
		if !o.dryRun || o.method != healthpb.Health_Check_FullMethodName {
			t.Errorf("observation %d: %+v, want dryRun on Check", i, o)
		}
	}
}

// The observer sees every call that is not skipped, with its decision.
func TestObserver(t *testing.T) {
	t.Parallel()
	var obs observations
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(1)), obs.option()))
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.ResourceExhausted)
	got := obs.all()
	if len(got) != 2 || !got[0].res.Allowed || got[1].res.Allowed || got[1].res.RetryAfter != time.Minute || got[0].dryRun {
		t.Errorf("observed %+v; want allowed, then refused for 1m, not dry-run", got)
	}
}

func TestHeaderStyles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		style ratelimit.HeaderStyle
		want  map[string]string
	}{
		{ratelimit.HeadersDraft11, map[string]string{"ratelimit-policy": `"3-per-1m0s";q=3;w=60`, "ratelimit": `"3-per-1m0s";r=2;t=20`, "ratelimit-limit": ""}},
		{ratelimit.HeadersLegacy, map[string]string{"x-ratelimit-limit": "3", "x-ratelimit-remaining": "2", "ratelimit-limit": ""}},
		{ratelimit.HeadersNone, map[string]string{"ratelimit-limit": "", "ratelimit": "", "x-ratelimit-limit": ""}},
	} {
		t.Run(tc.style.String(), func(t *testing.T) {
			s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(3)), ratelimit.WithHeaders(tc.style)))
			c := wantCodes(t, func() call { return s.check(t) }, codes.OK)[0]
			for k, want := range tc.want {
				if got := c.get(t, k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}

// observation is one call of a WithObserver func.
type observation struct {
	method string
	res    core.Result
	err    error
	dryRun bool
}

type observations struct {
	mu  sync.Mutex
	obs []observation
}

func (o *observations) option() ratelimit.Option {
	return ratelimit.WithObserver(func(_ context.Context, m string, res core.Result, err error, dryRun bool) {
		o.mu.Lock()
		o.obs = append(o.obs, observation{m, res, err, dryRun})
		o.mu.Unlock()
	})
}

func (o *observations) all() []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observation(nil), o.obs...)
}

func (o *observations) errs() []error {
	var errs []error
	for _, ob := range o.all() {
		errs = append(errs, ob.err)
	}
	return errs
}

// Interceptors chained after others see what those stored, and the
// handler runs only for allowed calls.
func TestHandlerRunsOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := 0
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		ran++
		mu.Unlock()
		return h(ctx, req)
	}
	s := serve(t, grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(limitertest.NewLimiter(t, core.PerMinute(2))), count))
	wantCodes(t, func() call { return s.check(t) }, codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted)
	if ran != 2 {
		t.Errorf("handler ran %d times, want 2", ran)
	}
}

// WithLogger's promise holds for a KeyFunc of the user's whose error
// quotes the call's metadata: its text is not logged (issue 36 item 12).
func TestLoggerNeverLogsClientText(t *testing.T) {
	t.Parallel()
	var log logBuffer
	key := ratelimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return "", errors.New("no account for token " + strings.Join(md.Get("x-token"), ","))
	})
	s := serveBoth(t, both(limitertest.NewLimiter(t, core.PerMinute(10)), key, ratelimit.WithLogger(log.logger())))
	wantCodes(t, func() call { return s.check(t, "x-token", "attacker-text") }, codes.InvalidArgument)
	if got := log.String(); !strings.Contains(got, "could not be rate limited") || strings.Contains(got, "attacker-text") {
		t.Errorf("log: %s; want the line, without the client's text", got)
	}
}
