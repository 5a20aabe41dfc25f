package core_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// chargeCases are limits whose scaled numbers are large (a rate sharing
// no factor with its period counts in tiny units), and small ones, for
// charges up to the largest int. Unit, Refill (units per µs: every one
// counts in µs) and the debt floor in units are the limit's integer form,
// spelled out: the floor is max(C, R·MaxWait) in units, at most 2^52.
var chargeCases = []struct {
	name    string
	limit   core.Limit
	maxWait time.Duration
	unit    int64 // units per token
	refill  int64 // units per µs
	floor   int64 // units the bucket may owe
}{
	// C·Unit = 8.64e15 > 2^52: the debt stops at 2^52 units (52124.99 tokens).
	{"100001 a day", core.Limit{Rate: 100001, Period: 24 * time.Hour}, 0, 86_400_000_000, 100001, 1 << 52},
	{"1 a year", core.Limit{Rate: 1, Period: 365 * 24 * time.Hour}, 0, 31_536_000_000_000, 1, 31_536_000_000_000},
	{"60 a minute", core.PerMinute(60), 0, 1_000_000, 1, 60_000_000},
	// R·MaxWait = 50 tokens > C = 10.
	{"10 a second, MaxWait 5s", core.PerSecond(10), 5 * time.Second, 100_000, 1, 5_000_000},
}

// A charge is never refused for its size: what the bucket cannot owe is
// forgiven and the bucket stops exactly at its floor, on every store
// alike, with a RetryAfter until the floor and one token are repaid.
func TestChargeBeyondBoundConformance(t *testing.T) {
	ns := []int{1, 60000, 100001, 152125, 152126, math.MaxInt32, 1 << 53, math.MaxInt}
	for storeName, mk := range stores(t) {
		if storeName == "cluster" || storeName == "sentinel" {
			continue // the same script as "redis"
		}
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range chargeCases {
				t.Run(tc.name, func(t *testing.T) {
					s := mk(t)
					if !s.realTime {
						t.Parallel()
					}
					obs := &waitEvents{}
					cfg := core.Config{Store: s.store, Limit: tc.limit, Name: "charge", FailMode: core.FailClosed,
						MaxWait: tc.maxWait, Timeout: 5 * time.Second, Observer: obs}
					if !s.realTime {
						cfg.DenyCacheSize = -1 // it counts on this process's clock, which the test does not move
					}
					l, err := core.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					slack := time.Duration(0)
					if s.realTime {
						slack = 250 * time.Millisecond
					}
					c := int64(tc.limit.Capacity()) * tc.unit
					// The whole tokens a full bucket can give down to its floor.
					most := (c + tc.floor) / tc.unit
					ctx := context.Background()
					for _, n := range ns {
						key := fmt.Sprint("k", n)
						got, err := l.Charge(ctx, key, n)
						if err != nil {
							t.Fatalf("Charge(%d): %v", n, err)
						}
						left, forgiven := -tc.floor, int64(0)
						if int64(n) <= most {
							left = c - int64(n)*tc.unit
						} else {
							forgiven = int64(n) - most
						}
						rem, retry := int(max(0, left/tc.unit)), time.Duration(0)
						if left < tc.unit {
							retry = time.Duration((tc.unit-left+tc.refill-1)/tc.refill) * time.Microsecond
						}
						if !got.Allowed || got.Remaining != rem || got.Degraded {
							t.Errorf("Charge(%d): allowed=%v remaining=%d degraded=%v, want true %d false", n, got.Allowed, got.Remaining, got.Degraded, rem)
						}
						if got.RetryAfter > retry || got.RetryAfter < retry-slack {
							t.Errorf("Charge(%d): RetryAfter %v, want %v", n, got.RetryAfter, retry)
						}
						if e := obs.waits[len(obs.waits)-1]; !e.Charge || e.N != n || int64(e.Forgiven) != forgiven {
							t.Errorf("Charge(%d): event %+v, want %d forgiven", n, e, forgiven)
						}
						if retry == 0 {
							continue
						}
						// The next request waits as long; a bucket at its floor
						// owes no more: another charge is forgiven whole.
						if a, err := l.Allow(ctx, key); err != nil || a.Allowed || a.RetryAfter > retry || a.RetryAfter < retry-slack {
							t.Errorf("after Charge(%d): Allow %+v, %v; want refused for %v", n, a, err, retry)
						}
						if forgiven == 0 {
							continue
						}
						again, err := l.Charge(ctx, key, n)
						if err != nil || again.Remaining != 0 || again.RetryAfter > retry || again.RetryAfter < retry-slack {
							t.Errorf("Charge(%d) again: %+v, %v; want RetryAfter %v", n, again, err, retry)
						}
						if e := obs.waits[len(obs.waits)-1]; e.Forgiven != n && !s.realTime { // a real clock may have repaid a token
							t.Errorf("Charge(%d) again: %d forgiven, want all", n, e.Forgiven)
						}
					}
				})
			}
		})
	}
}

// Charge refuses only a caller's mistakes: an empty key or n < 1.
func TestChargeInvalid(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.Limit{Rate: 100001, Period: 24 * time.Hour}, FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{0, -1, math.MinInt} {
		if _, err := l.Charge(ctx, "k", n); !errors.Is(err, core.ErrInvalidCost) {
			t.Errorf("Charge(%d): %v, want ErrInvalidCost", n, err)
		}
	}
	if _, err := l.Charge(ctx, "", 1); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("Charge of an empty key: %v, want ErrEmptyKey", err)
	}
	if _, err := l.Charge(ctx, "k", math.MaxInt); err != nil {
		t.Errorf("Charge(MaxInt): %v, want forgiven", err)
	}
}
