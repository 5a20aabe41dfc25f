package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestEveryRealisticLimit: New accepts every rate up to 10^9 a second and
// any rate a day or per 30 days, each counted exactly (in µs, or ms or s
// where µs would pass 2^53). Before, 123457 a day and 99999 per 30 days
// were refused while 1000000 a day was accepted.
func TestEveryRealisticLimit(t *testing.T) {
	t.Parallel()
	month := 30 * 24 * time.Hour
	for _, l := range []core.Limit{
		core.PerSecond(1e9), core.PerSecond(1), core.PerMinute(7), core.PerHour(1 << 40),
		core.PerDay(1), core.PerDay(123457), core.PerDay(1000000), core.PerDay(1e9 * 86400 / 1000),
		{Rate: 99999, Period: month}, {Rate: 1, Period: month}, {Rate: 1e9, Period: month},
		core.PerDay(123457).WithBurst(1e6),
	} {
		if _, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: l, FailMode: core.FailOpen}); err != nil {
			t.Errorf("%v: %v", l, err)
		}
	}
}

// TestPerDayOnRedis: PerDay(123457) on real Redis, counted in ms: the
// whole burst, then a denial until the next token, 700 ms at most.
func TestPerDayOnRedis(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	store := core.NewRedisStore(c, core.WithPrefix(prefix))
	l := limitertest.New(t, core.Config{Store: store, Limit: core.PerDay(123457), FailMode: core.FailClosed, Timeout: time.Second, DenyCacheSize: -1})
	ctx := context.Background()
	if r, err := l.AllowN(ctx, "k", 123457); err != nil || !r.Allowed || r.Remaining != 0 || r.ResetAfter > 24*time.Hour {
		t.Fatalf("the whole burst: %+v %v", r, err)
	}
	r, _ := l.Allow(ctx, "k")
	if r.Allowed || r.Degraded || r.RetryAfter <= 0 || r.RetryAfter > 700*time.Millisecond {
		t.Fatalf("after the burst: %+v; want denied for at most 700ms", r)
	}
	v := c.Get(ctx, store.Key(l.Name(), "k")).Val()
	if parts := strings.Split(v, ":"); len(parts) != 6 || len(parts[1]) != 13 || parts[5] != "1000" {
		t.Fatalf("bucket holds %q; want <units>:<ms since the epoch>:<capacity>:<refill>:<unit>:1000 (µs per tick)", v)
	}
	backdate(t, c, prefix, r.RetryAfter+time.Millisecond) // the bucket, a token's time older
	if r, _ := l.Allow(ctx, "k"); !r.Allowed {
		t.Fatalf("a token later: %+v; want allowed", r)
	}
}

// TestLimitValidate: Validate says exactly what New says of a limit, with
// no limiter built.
func TestLimitValidate(t *testing.T) {
	t.Parallel()
	for _, l := range []core.Limit{
		core.PerSecond(1e9), core.PerDay(123457), core.PerMinute(3).WithBurst(5),
		{}, {Rate: 1}, {Rate: -1, Period: time.Second}, {Rate: 1, Period: time.Nanosecond},
		core.PerSecond(1).WithBurst(-1), core.PerSecond(1).WithBurst(1e16), core.PerSecond(1e9).WithBurst(1 << 62),
	} {
		_, newErr := core.New(core.Config{Store: core.NewMemoryStore(), Limit: l, FailMode: core.FailOpen})
		err := l.Validate()
		if (err == nil) != (newErr == nil) || err != nil && !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("%+v: Validate %v; New %v", l, err, newErr)
		}
	}
}
