package grpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// alsoLimiters are a per-peer limiter (3 a minute) and a per-tenant one
// (2 a minute) on one memory store, at a fixed time.
func alsoLimiters(t *testing.T) (peer, tenant *core.Limiter) {
	t.Helper()
	clk := limitertest.NewClock()
	store := core.NewMemoryStore(core.WithClock(clk.Now))
	peer = limitertest.New(t, core.Config{Store: store, Name: "peer", Limit: core.PerMinute(3), FailMode: core.FailOpen})
	tenant = limitertest.New(t, core.Config{Store: store, Name: "tenant", Limit: core.PerMinute(2), FailMode: core.FailOpen})
	return peer, tenant
}

// remainingOf is what key's bucket of l holds now.
func remainingOf(t *testing.T, l *core.Limiter, key ratelimit.KeyFunc, kv ...string) int {
	t.Helper()
	k, err := key(callCtx("-", metadata.Pairs(kv...)), "/grpc.health.v1.Health/Check")
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Peek(context.Background(), k, 1)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// TestWithAlso: a call is decided by its peer's bucket and its tenant's
// in one call, all or nothing; the metadata describes the binding result
// and lists both policies; a tenant key error takes nothing.
func TestWithAlso(t *testing.T) {
	t.Parallel()
	peer, tenant := alsoLimiters(t)
	tenantKey := ratelimit.Metadata("x-tenant")
	s := serveBoth(t, both(peer, ratelimit.WithKey(ratelimit.Metadata("x-client")), ratelimit.WithAlso(tenant, tenantKey)))
	as := func(client, tn string) func() call {
		return func() call { return s.check(t, "x-client", client, "x-tenant", tn) }
	}
	// Tenant acme: 2 calls, then the tenant refuses; client a keeps its third token.
	calls := wantCodes(t, as("a", "acme"), codes.OK, codes.OK, codes.ResourceExhausted)
	for i, want := range [][3]string{{"2", "1", "30"}, {"2", "0", "60"}, {"2", "0", "30"}} {
		c := calls[i]
		if got := [3]string{c.get(t, "ratelimit-limit"), c.get(t, "ratelimit-remaining"), c.get(t, "ratelimit-reset")}; got != want {
			t.Errorf("call %d: limit, remaining, reset %q, want the tenant's %q", i+1, got, want)
		}
		if got := c.get(t, "ratelimit-policy"); got != "3;w=60, 2;w=60" {
			t.Errorf("call %d: ratelimit-policy %q, want both", i+1, got)
		}
	}
	if d, ok := calls[2].retryDelay(); !ok || d != 30*time.Second {
		t.Errorf("refused by the tenant: RetryInfo %v, want its 30s", d)
	}
	if got := remainingOf(t, peer, ratelimit.Metadata("x-client"), "x-client", "a"); got != 1 {
		t.Errorf("client a after the tenant's refusal: %d left, want 1", got)
	}
	// Client a spends its last token under another tenant, then its own
	// limit refuses: that tenant is not charged.
	wantCodes(t, as("a", "beta"), codes.OK, codes.ResourceExhausted)
	if got := remainingOf(t, tenant, tenantKey, "x-tenant", "beta"); got != 1 {
		t.Errorf("tenant beta after the client's refusal: %d left, want 1", got)
	}
	// No tenant: a key error, as WithKey's; nothing taken from client b.
	c := s.check(t, "x-client", "b")
	if c.code() != codes.InvalidArgument {
		t.Errorf("no tenant: %v, want InvalidArgument", c.code())
	}
	if got := remainingOf(t, peer, ratelimit.Metadata("x-client"), "x-client", "b"); got != 3 {
		t.Errorf("client b after its tenant key error: %d left, want 3", got)
	}
	// A stream is decided the same way.
	if got := s.list(t).code(); got != codes.InvalidArgument {
		t.Errorf("List without keys: %v, want InvalidArgument", got)
	}
}

// TestWithAlsoConcurrencyPanics: the in-flight interceptors refuse WithAlso.
func TestWithAlsoConcurrencyPanics(t *testing.T) {
	t.Parallel()
	_, tenant := alsoLimiters(t)
	c, err := core.NewConcurrency(core.ConcurrencyConfig{Store: core.NewMemoryStore(), Name: "slots", Max: 1, Lease: time.Minute, FailMode: core.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	ratelimit.ConcurrencyUnaryServerInterceptor(c, ratelimit.WithAlso(tenant, ratelimit.Metadata("x-tenant")))
}

// TestWithAlsoAnotherStore: a WithAlso limiter on another store than the
// interceptor's own or a WithMethods limiter panics at construction.
func TestWithAlsoAnotherStore(t *testing.T) {
	t.Parallel()
	peer, tenant := alsoLimiters(t)
	elsewhere := limitertest.New(t, core.Config{Store: core.NewMemoryStore(), Name: "elsewhere", Limit: core.PerMinute(3), FailMode: core.FailOpen})
	key := ratelimit.Metadata("x-tenant")
	for name, f := range map[string]func(){
		"own":      func() { ratelimit.UnaryServerInterceptor(elsewhere, ratelimit.WithAlso(tenant, key)) },
		"WithAlso": func() { ratelimit.StreamServerInterceptor(peer, ratelimit.WithAlso(elsewhere, key)) },
		"WithMethods": func() {
			ratelimit.UnaryServerInterceptor(peer, ratelimit.WithAlso(tenant, key), ratelimit.WithMethods(map[string]*core.Limiter{"/s.S/M": elsewhere}))
		},
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "uses another store than limiter") {
					t.Errorf("%s: panic %v; want one naming the other store", name, p)
				}
			}()
			f()
		}()
	}
	ratelimit.UnaryServerInterceptor(peer, ratelimit.WithAlso(tenant, key)) // one store: no panic
}

// TestWithAlsoCost: a cost a WithAlso limiter can never allow is
// WithCost's bug, codes.Internal, as for the interceptor's own limiter;
// nothing is taken.
func TestWithAlsoCost(t *testing.T) {
	t.Parallel()
	peer, tenant := alsoLimiters(t)
	client := ratelimit.Metadata("x-client")
	s := serveBoth(t, both(peer, ratelimit.WithKey(client), ratelimit.WithAlso(tenant, ratelimit.Metadata("x-tenant")),
		ratelimit.WithCost(func(context.Context, string) int { return 3 }))) // the tenant's burst is 2
	if got := s.check(t, "x-client", "a", "x-tenant", "acme").code(); got != codes.Internal {
		t.Errorf("cost 3 over the tenant's burst: %v, want Internal", got)
	}
	if got := remainingOf(t, peer, client, "x-client", "a"); got != 3 {
		t.Errorf("client a: %d left, want 3", got)
	}
}
