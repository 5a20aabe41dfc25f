package grpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

func newConcurrency(t *testing.T, cfg core.ConcurrencyConfig) *core.Concurrency {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = core.NewMemoryStore()
	}
	if cfg.Name == "" {
		cfg.Name = "inflight"
	}
	if cfg.FailMode == 0 {
		cfg.FailMode = core.FailOpen
	}
	c, err := core.NewConcurrency(cfg)
	if err != nil {
		t.Fatalf("core.NewConcurrency: %v", err)
	}
	return c
}

// ended signals each time a call or stream has ended, once every
// interceptor inside it (the concurrency one's release included) has
// returned: it is chained outermost.
type ended chan string

func (e ended) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer func() { e <- info.FullMethod }()
	return h(ctx, req)
}

func (e ended) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	defer func() { e <- info.FullMethod }()
	return h(srv, ss)
}

func newEnded() ended { return make(ended, 64) }

// wait returns once a call or stream of method has ended.
func (e ended) wait(t *testing.T, method string) {
	t.Helper()
	for {
		select {
		case m := <-e:
			if m == method {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not end", method)
		}
	}
}

// serveConcurrency serves the concurrency interceptors of c, innermost,
// after done.
func serveConcurrency(t *testing.T, c *core.Concurrency, done ended, opts ...ratelimit.Option) *server {
	t.Helper()
	return serve(t,
		grpc.ChainUnaryInterceptor(done.unary, ratelimit.ConcurrencyUnaryServerInterceptor(c, opts...)),
		grpc.ChainStreamInterceptor(done.stream, ratelimit.ConcurrencyStreamServerInterceptor(c, opts...)))
}

// An open stream holds its slot for as long as it is open: with Max 2, a
// third stream and a unary call are refused while two are open, and the
// slot is free again once one ends.
func TestConcurrencyStreamHoldsSlot(t *testing.T) {
	t.Parallel()
	done := newEnded()
	s := serveConcurrency(t, newConcurrency(t, core.ConcurrencyConfig{Max: 2, Lease: 30 * time.Second}), done)
	ctx1, end1 := context.WithCancel(context.Background())
	defer end1()
	_, md, st := watch(t, s, ctx1)
	if st.Code() != codes.OK || md.Get("ratelimit-limit")[0] != "2" || md.Get("ratelimit-remaining")[0] != "1" {
		t.Fatalf("stream 1: %v, metadata %v; want OK, limit 2, remaining 1", st, md)
	}
	_, _, st = watch(t, s, context.Background())
	if st.Code() != codes.OK {
		t.Fatalf("stream 2: %v", st)
	}
	_, md, st = watch(t, s, context.Background())
	if st.Code() != codes.ResourceExhausted || md.Get("ratelimit-remaining")[0] != "0" {
		t.Fatalf("stream 3: %v, metadata %v; want ResourceExhausted, remaining 0", st, md)
	}
	if d, ok := (call{st: st}).retryDelay(); !ok || d <= 0 || d > 30*time.Second {
		t.Errorf("stream 3: RetryInfo %v (present %v), want (0, 30s]", d, ok)
	}
	done.wait(t, healthpb.Health_Watch_FullMethodName) // stream 3's refusal
	wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)
	done.wait(t, healthpb.Health_Check_FullMethodName)
	end1()
	done.wait(t, healthpb.Health_Watch_FullMethodName) // stream 1 released its slot
	c := wantCodes(t, func() call { return s.check(t) }, codes.OK)[0]
	if got := c.get(t, "ratelimit-remaining"); got != "0" {
		t.Errorf("unary call beside stream 2: remaining %q, want 0", got)
	}
}

// A unary call holds its slot until its handler returns, and gives it
// back then.
func TestConcurrencyUnaryReleases(t *testing.T) {
	t.Parallel()
	done := newEnded()
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthpb.Health_List_FullMethodName {
			close(entered)
			<-release
		}
		return h(ctx, req)
	}
	c := newConcurrency(t, core.ConcurrencyConfig{Max: 1, Lease: 30 * time.Second})
	s := serve(t, grpc.ChainUnaryInterceptor(done.unary, ratelimit.ConcurrencyUnaryServerInterceptor(c), block))
	blocked := make(chan call, 1)
	go func() { blocked <- s.list(t) }()
	<-entered // List holds the slot, its handler running
	wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)
	done.wait(t, healthpb.Health_Check_FullMethodName)
	close(release)
	if c := <-blocked; c.code() != codes.OK {
		t.Fatalf("List: %v", c.st)
	}
	done.wait(t, healthpb.Health_List_FullMethodName)
	for range 3 {
		wantCodes(t, func() call { return s.check(t) }, codes.OK)
		done.wait(t, healthpb.Health_Check_FullMethodName)
	}
}

// Dry-run lets a call through without a slot; FailClosed refuses with
// Unavailable while Redis is down, FailOpen serves.
func TestConcurrencyDryRunAndFailModes(t *testing.T) {
	t.Parallel()
	t.Run("dry-run", func(t *testing.T) {
		var obs observations
		done := newEnded()
		s := serveConcurrency(t, newConcurrency(t, core.ConcurrencyConfig{Max: 1, Lease: 30 * time.Second}), done, ratelimit.WithDryRun(), obs.option())
		_, _, st := watch(t, s, context.Background())
		_, _, st2 := watch(t, s, context.Background())
		if st.Code() != codes.OK || st2.Code() != codes.OK {
			t.Fatalf("streams: %v, %v; want both OK", st, st2)
		}
		if got := obs.all(); len(got) != 2 || !got[0].res.Allowed || got[1].res.Allowed || !got[1].dryRun {
			t.Errorf("observed %+v; want allowed, then a dry-run refusal", got)
		}
	})
	for _, tc := range []struct {
		mode core.FailMode
		code codes.Code
	}{{core.FailClosed, codes.Unavailable}, {core.FailOpen, codes.OK}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			t.Cleanup(func() { client.Close() })
			c := newConcurrency(t, core.ConcurrencyConfig{Store: core.NewRedisStore(client), Max: 2, Lease: 3 * time.Second, FailMode: tc.mode, Timeout: time.Second})
			done := newEnded()
			s := serveConcurrency(t, c, done)
			wantCodes(t, func() call { return s.check(t) }, codes.OK)
			m.Close()
			got := wantCodes(t, func() call { return s.check(t) }, tc.code)[0]
			if len(got.md.Get("ratelimit-limit")) != 0 {
				t.Errorf("degraded: metadata %v, want none", got.md)
			}
			if _, ok := got.retryDelay(); ok != (tc.code != codes.OK) {
				t.Errorf("RetryInfo present %v", ok)
			}
		})
	}
}

func TestConcurrencyOptionsRefused(t *testing.T) {
	t.Parallel()
	c := newConcurrency(t, core.ConcurrencyConfig{Max: 1})
	lim := limitertest.NewLimiter(t, core.PerMinute(1))
	for name, opt := range map[string]ratelimit.Option{
		"WithCost":    ratelimit.WithCost(func(context.Context, string) int { return 1 }),
		"WithMethods": ratelimit.WithMethods(map[string]*core.Limiter{healthpb.Health_Check_FullMethodName: lim}),
	} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, name+" does not apply") {
					t.Errorf("%s: panic %q", name, r)
				}
			}()
			ratelimit.ConcurrencyStreamServerInterceptor(c, opt)
		}()
	}
}

// With a Rate, the metadata is the Rate's, and a call refused by either
// limit takes nothing from the other.
func TestConcurrencyWithRate(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	rate, err := core.New(core.Config{Store: store, Limit: core.PerHour(2), Name: "calls", FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	done := newEnded()
	s := serveConcurrency(t, newConcurrency(t, core.ConcurrencyConfig{Store: store, Max: 1, Lease: 30 * time.Second, Rate: rate}), done)
	ctx1, end1 := context.WithCancel(context.Background())
	defer end1()
	_, md, st := watch(t, s, ctx1)
	if st.Code() != codes.OK || md.Get("ratelimit-limit")[0] != "2" || md.Get("ratelimit-remaining")[0] != "1" {
		t.Fatalf("stream: %v, metadata %v; want OK, the rate's limit 2, 1 token left", st, md)
	}
	c := wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)[0] // the slot is held
	// The slots' refusal, not the rate's (issue 36 item 10): their
	// fields, no policy reading as a rate, a second to wait, not the
	// 30 s Lease. (The last token is still there: see below.)
	if c.get(t, "ratelimit-limit") != "1" || c.get(t, "ratelimit-remaining") != "0" || len(c.md.Get("ratelimit-policy")) != 0 {
		t.Errorf("refused by the slot: metadata %v, want the slots' (limit 1, remaining 0, no policy)", c.md)
	}
	if d, ok := c.retryDelay(); !ok || d > time.Second || c.st.Message() != "too many calls in flight; retry in 1s" {
		t.Errorf("refused by the slot: %q, RetryInfo %v; want a second, saying slots", c.st.Message(), d)
	}
	done.wait(t, healthpb.Health_Check_FullMethodName)
	end1()
	done.wait(t, healthpb.Health_Watch_FullMethodName)
	wantCodes(t, func() call { return s.check(t) }, codes.OK) // the last token
	done.wait(t, healthpb.Health_Check_FullMethodName)
	c = wantCodes(t, func() call { return s.check(t) }, codes.ResourceExhausted)[0] // no token
	if d, ok := c.retryDelay(); !ok || d < 29*time.Minute {
		t.Errorf("refused by the rate: RetryInfo %v, want the rate's 30 minutes", d)
	}
}
