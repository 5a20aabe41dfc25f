package bucket

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestDecideTicks: refills come at whole ticks, so a wait is counted to a
// tick boundary from now.
func TestDecideTicks(t *testing.T) {
	t.Parallel()
	p := NewPolicy("p", 2, 1, 1, 1000) // 1 token a ms, burst 2
	d, left := p.decide(0, 1, false, 10_400)
	if d.Allowed || left != 0 || d.RetryAfter != 600*time.Microsecond || d.ResetAfter != 1600*time.Microsecond {
		t.Fatalf("empty bucket at 10.4 ms: %+v left %d", d, left)
	}
	if got := p.refill(0, 10_400, 10_999); got != 0 {
		t.Fatalf("refill within a tick: %d, want 0", got)
	}
	if got := p.refill(0, 10_999, 11_000); got != 1 {
		t.Fatalf("refill across a tick boundary: %d, want 1", got)
	}
}

// TestRefillOverflow: el × Refill past 64 bits fills the bucket, and a
// clock moved back refills nothing.
func TestRefillOverflow(t *testing.T) {
	t.Parallel()
	p := NewPolicy("p", MaxExact-2, MaxExact-2, 1, 1)
	if got := p.refill(0, 0, math.MaxInt64); got != p.Capacity {
		t.Fatalf("refill of a long idle bucket: %d, want %d", got, p.Capacity)
	}
	if got := p.refill(5, 100, 50); got != 5 {
		t.Fatalf("refill with the clock moved back: %d, want 5", got)
	}
}

// TestChargeDebtFloor: a charge takes down to max(C, R·MaxWait) owed at
// most, the rest forgiven; a bucket owing that much gives nothing more.
func TestChargeDebtFloor(t *testing.T) {
	t.Parallel()
	p := NewPolicy("p", 10, 1, 1, 1_000_000) // 1 a second, burst 10
	if got := p.chargeFloor(0); got != 10 {
		t.Fatalf("floor without MaxWait: %d, want the capacity 10", got)
	}
	if got := p.chargeFloor(60_000_000); got != 60 {
		t.Fatalf("floor of a minute's MaxWait: %d, want 60", got)
	}
	q := NewPolicy("q", 10, 1, 1, 1)
	if got := q.chargeFloor(math.MaxInt64); got != maxCharge {
		t.Fatalf("floor of an endless MaxWait: %d, want %d", got, maxCharge)
	}
	left, wait, forgiven := p.waiting(OpCharge, 0, 25, 10, 0, 0)
	if left != -10 || forgiven != 5 || wait != 11*time.Second {
		t.Fatalf("charge of 25 on a full bucket of 10: left %d, forgiven %d, wait %v; want -10, 5, 11s", left, forgiven, wait)
	}
	if got := chargeReach(-10, 10, 1); got != 0 {
		t.Fatalf("reach of a bucket at its floor: %d, want 0", got)
	}
	if got := ChargeCap([]Policy{p}, 0); got != 21 {
		t.Fatalf("ChargeCap: %d, want 21 (10 held, 10 owed, plus one)", got)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ok := NewPolicy("p", 10, 1, 1, 1)
	for _, c := range []struct {
		subject string
		n       int
		ps      []Policy
		want    error
	}{
		{"", 1, []Policy{ok}, EmptyKey},
		{"k", 0, []Policy{ok}, InvalidCost},
		{"k", 11, []Policy{ok}, CostTooHigh},
		{"k", 1, nil, InvalidConfig},
		{"k", 1, []Policy{{Name: "p", Capacity: MaxExact, Refill: 1, Unit: 1, Tick: 1}}, InvalidLimit},
		{"k", 10, []Policy{ok}, nil},
	} {
		if got := Check(c.subject, c.n, c.ps); !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("Check(%q, %d): %v, want %v", c.subject, c.n, got, c.want)
		}
	}
	if err := CheckOp(WithArg(OpCharge, 5), "k", 1000, []Policy{ok}); err != nil {
		t.Errorf("a charge above the burst: %v, want nil", err)
	}
}

// TestTick: a limit counts in the finest of µs, ms and s that keeps it
// exact below 2^53.
func TestTick(t *testing.T) {
	t.Parallel()
	const day = 24 * 3600 * 1_000_000
	for _, c := range []struct{ rate, period, capacity, want int64 }{
		{10, 1_000_000, 10, 1},
		{123457, day, 123457, 1000},
		{123456791, day, 123456791, 1_000_000},
		{3, 1700, 4, 1},       // 1.7 ms: µs only
		{1, 1, MaxExact, 0},   // the capacity alone reaches 2^53
		{7, 1500, 1 << 52, 0}, // not a whole number of ms
	} {
		if got := Tick(c.rate, c.period, c.capacity); got != c.want {
			t.Errorf("Tick(%d, %d µs, %d) = %d, want %d", c.rate, c.period, c.capacity, got, c.want)
		}
	}
	p := PolicyOf("p", 123457, day, 123457)
	if p.Tick != 1000 || p.Capacity != 123457*p.Unit || p.Refill*(day/p.Tick) != 123457*p.Unit {
		t.Errorf("PolicyOf: %+v", p)
	}
}
