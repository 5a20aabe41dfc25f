package transport

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Limits as core builds their policies (core.Limit.policy), for tests
// that send policies of known limits.

const defaultPrefix = "ratelimit:" // core.DefaultPrefix

type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

type NamedLimit struct {
	Name  string
	Limit Limit
}

func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }
func PerHour(rate int) Limit   { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// policy is core's Limit.policy: the first tick (µs, ms, s) at which the
// limit stays exact.
func (l Limit) policy(name string) bucket.Policy {
	us := l.Period.Microseconds()
	for _, tick := range []int64{1, 1000, 1_000_000} {
		if us%tick != 0 {
			break
		}
		g := gcd(int64(l.Rate), us/tick)
		unit, refill := us/tick/g, int64(l.Rate)/g
		if c := int64(l.Burst); c <= (bucket.MaxExact-refill)/unit && bucket.CeilDiv(c*unit, refill) < bucket.MaxExact/tick {
			return bucket.NewPolicy(name, int64(l.Burst)*unit, refill, unit, tick)
		}
	}
	panic("limit too large")
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func mustPolicies(t *testing.T, limits ...NamedLimit) []bucket.Policy {
	t.Helper()
	ps := make([]bucket.Policy, len(limits))
	for i, nl := range limits {
		ps[i] = nl.Limit.policy(nl.Name)
	}
	return ps
}

func PerDay(rate int) Limit { return Limit{Rate: rate, Period: 24 * time.Hour, Burst: rate} }

// Take, Peek, Refund and Reset decide one request through s, as core's
// tests do through a RedisStore: by ctx's deadline.
func (s *Store) Take(ctx context.Context, subject string, n int, policies []bucket.Policy, each []bucket.Outcome) (bucket.Outcome, error) {
	return s.ask(ctx, bucket.OpTake, subject, n, policies, each)
}

func (s *Store) Peek(ctx context.Context, subject string, n int, policies []bucket.Policy, each []bucket.Outcome) (bucket.Outcome, error) {
	return s.ask(ctx, bucket.OpPeek, subject, n, policies, each)
}

func (s *Store) Refund(ctx context.Context, subject string, n int, policies []bucket.Policy, each []bucket.Outcome) (bucket.Outcome, error) {
	return s.ask(ctx, bucket.OpRefund, subject, n, policies, each)
}

func (s *Store) Reset(ctx context.Context, subject string, policies []bucket.Policy) error {
	return s.Clear(ctx, bucket.HashSubject(subject), policies)
}

func (s *Store) ask(ctx context.Context, op int, subject string, n int, policies []bucket.Policy, each []bucket.Outcome) (bucket.Outcome, error) {
	d, _ := ctx.Deadline()
	return s.Do(ctx, bucket.Ask{Op: op, Subj: bucket.HashSubject(subject), N: n, Policies: policies, Each: each, Deadline: d})
}
