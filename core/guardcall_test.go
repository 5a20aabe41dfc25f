package core

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestGuardCallBracket: guard.call is the one bracket around a store
// call: it calls nothing while the breaker is open, gives the call the
// caller's values but never its cancellation, counts failed calls toward
// the breaker and lets the half-open breaker's probe through alone.
func TestGuardCallBracket(t *testing.T) {
	t.Parallel()
	l, err := New(Config{Store: failing{err: errors.New("i/o error")}, Limit: PerSecond(10), FailMode: FailOpen,
		BreakerFailures: 2, BreakerCooldown: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var now int64
	l.clock = func() int64 { return now }
	g := &l.guard
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancel()
	deadline := time.Now().Add(time.Minute)
	calls := 0
	fail := func(ctx context.Context) error {
		calls++
		if ctx.Err() != nil || ctx.Value(key{}) != "v" {
			t.Errorf("call %d: ctx err %v, value %v; want the caller's values, never its cancellation", calls, ctx.Err(), ctx.Value(key{}))
		}
		return errors.New("i/o error")
	}
	for i := range 2 {
		if _, err := g.call(ctx, "k", deadline, fail); err == nil || errors.Is(err, ErrCircuitOpen) || !asked(err) {
			t.Fatalf("failed call %d: %v; want the store's failure", i, err)
		}
	}
	if br, err := g.call(ctx, "k", deadline, fail); !errors.Is(err, ErrCircuitOpen) || asked(err) || calls != 2 || br != g.breakers.forKey("k") {
		t.Fatalf("after 2 failures: %v, %d calls; want ErrCircuitOpen, the store not called", err, calls)
	}
	now += int64(time.Second)
	probing := false
	_, err = g.call(ctx, "k", deadline, func(ctx context.Context) error {
		probing = true
		if _, err := g.call(ctx, "k", deadline, fail); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("a call beside the probe: %v; want ErrCircuitOpen", err)
		}
		return nil
	})
	if err != nil || !probing {
		t.Fatalf("probe: %v, called %v; want it called and answered", err, probing)
	}
	if _, err := g.call(ctx, "k", deadline, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after the probe answered: %v; want the breaker closed", err)
	}
}
