package bucket

import (
	"context"
	"time"
)

// The tests build policies from limits as package core does
// (core.Limit.policy), and call a Table as core.MemoryStore does.

type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }
func PerHour(rate int) Limit   { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }
func PerDay(rate int) Limit    { return Limit{Rate: rate, Period: 24 * time.Hour, Burst: rate} }

func (l Limit) WithBurst(burst int) Limit {
	l.Burst = burst
	return l
}

type NamedLimit struct {
	Name  string
	Limit Limit
}

// Policies is core's policies, for limits the tests know to be valid.
func Policies(limits ...NamedLimit) ([]Policy, error) {
	ps := make([]Policy, len(limits))
	for i, nl := range limits {
		l := nl.Limit
		c := int64(l.Burst)
		if c == 0 {
			c = int64(l.Rate)
		}
		if Tick(int64(l.Rate), l.Period.Microseconds(), c) == 0 {
			return nil, InvalidLimit
		}
		ps[i] = PolicyOf(nl.Name, int64(l.Rate), l.Period.Microseconds(), c)
	}
	return ps, nil
}

type MemoryOption func(*tableOptions)

type tableOptions struct {
	clock   func() time.Time
	maxKeys int
	sweep   time.Duration
}

func WithClock(now func() time.Time) MemoryOption {
	return func(o *tableOptions) { o.clock = now }
}
func WithMaxKeys(n int) MemoryOption { return func(o *tableOptions) { o.maxKeys = n } }
func WithSweepInterval(d time.Duration) MemoryOption {
	return func(o *tableOptions) { o.sweep = d }
}

// NewMemoryStore is core.NewMemoryStore's table.
func NewMemoryStore(opts ...MemoryOption) *Table {
	o := tableOptions{maxKeys: 1 << 20, sweep: time.Minute}
	for _, f := range opts {
		f(&o)
	}
	return NewTable(o.clock, o.maxKeys, o.sweep)
}

func (s *Table) do(op int, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	if err := Check(subject, n, policies); err != nil {
		return Outcome{}, err
	}
	return s.Apply(&Ask{Op: op, Subj: subject, N: n, Policies: policies, Each: each}), nil
}

func (s *Table) Take(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return s.do(OpTake, subject, n, policies, each)
}

func (s *Table) Peek(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return s.do(OpPeek, subject, n, policies, each)
}

func (s *Table) Refund(_ context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	return s.do(OpRefund, subject, n, policies, each)
}

func (s *Table) Reset(_ context.Context, subject string, policies []Policy) error {
	s.Clear(subject, policies)
	return nil
}
