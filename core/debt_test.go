package core_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// debtStep is one call of a debt conformance case and what it must
// return: a take, a reservation (retry: its booked delay when OK, else
// its RetryAfter), a cancel of an earlier step's reservation, a charge
// (retry: until a token exists) or a pause.
type debtStep struct {
	wait    time.Duration // clock advance before the call (stopped clocks only)
	op      string        // take, reserve, cancel, charge, pause
	n       int           // default 1
	of      int           // cancel: the step whose reservation
	pause   time.Duration // pause
	lim     core.Limit    // default the case's; the same Name
	allow   bool
	rem     int
	retry   time.Duration
	reset   time.Duration
	nocheck bool // a cancel or pause: nothing to check
}

// slower is a limit slower than debtCases' own.
var slower = core.Limit{Rate: 3, Period: 2 * time.Second}

var debtCases = []struct {
	name    string
	limit   core.Limit
	maxWait time.Duration
	stopped bool // needs a stopped clock
	steps   []debtStep
}{
	{"reserve, owe, refuse, cancel, charge, pause", core.PerSecond(10), time.Second, true, []debtStep{
		{op: "reserve", n: 10, allow: true, rem: 0, reset: time.Second},
		// 5 more within MaxWait: owed, 500 ms away.
		{op: "reserve", n: 5, allow: true, rem: 0, retry: 500 * time.Millisecond, reset: 1500 * time.Millisecond},
		// 6 more would wait 1.1 s: refused, nothing booked.
		{op: "reserve", n: 6, allow: false, rem: 0, retry: 1100 * time.Millisecond, reset: 1500 * time.Millisecond},
		// The bucket owes 5: a take waits for the debt and its own token.
		{op: "take", allow: false, rem: 0, retry: 600 * time.Millisecond, reset: 1500 * time.Millisecond},
		// Before its time, the last booking gives its 5 back: 2 left.
		{wait: 200 * time.Millisecond, op: "cancel", of: 1, nocheck: true},
		{op: "take", n: 2, allow: true, rem: 0, reset: time.Second},
		// Never refused; the debt stops at max(C, R·MaxWait) = 10, the
		// rest forgiven; a token exists 1.1 s later.
		{op: "charge", n: 25, allow: true, rem: 0, retry: 1100 * time.Millisecond, reset: 2 * time.Second},
		{op: "take", allow: false, rem: 0, retry: 1100 * time.Millisecond, reset: 2 * time.Second},
		// An upstream's pause: owes what refills in 3 s.
		{op: "pause", pause: 3 * time.Second, nocheck: true},
		{op: "take", allow: false, rem: 0, retry: 3100 * time.Millisecond, reset: 4 * time.Second},
		// A cancel at or after the reservation's time does nothing.
		{op: "cancel", of: 1, nocheck: true},
		{wait: 3100 * time.Millisecond, op: "take", allow: true, rem: 0, reset: time.Second},
	}},
	// x/time/rate's Cancel: what later bookings counted on stays taken.
	{"a cancel keeps what later bookings counted on", core.PerSecond(1), 5 * time.Second, true, []debtStep{
		{op: "take", allow: true, rem: 0, reset: time.Second},
		{op: "reserve", allow: true, rem: 0, retry: time.Second, reset: 2 * time.Second},
		{op: "reserve", allow: true, rem: 0, retry: 2 * time.Second, reset: 3 * time.Second},
		// The first booking's token is what the second counts on: its
		// cancel gives nothing back (a token 2.5 s away, as before).
		{wait: 500 * time.Millisecond, op: "cancel", of: 1, nocheck: true},
		{op: "take", allow: false, rem: 0, retry: 2500 * time.Millisecond, reset: 2500 * time.Millisecond},
		// The last booking's cancel gives it back.
		{op: "cancel", of: 2, nocheck: true},
		{op: "take", allow: false, rem: 0, retry: 1500 * time.Millisecond, reset: 1500 * time.Millisecond},
	}},
	// DESIGN §3: a limit that changes keeps what is owed.
	{"a changed limit keeps the debt", core.PerSecond(10), 0, true, []debtStep{
		{op: "charge", n: 20, allow: true, rem: 0, retry: 1100 * time.Millisecond, reset: 2 * time.Second},
		// Owes 10 tokens; at 20 a second 11 come in 550 ms, the bucket is
		// full in 1.5 s.
		{lim: core.PerSecond(20), op: "take", allow: false, rem: 0, retry: 550 * time.Millisecond, reset: 1500 * time.Millisecond},
		{wait: 550 * time.Millisecond, lim: core.PerSecond(20), op: "take", allow: true, rem: 0, reset: time.Second},
	}},
	// DESIGN §3: a lower limit's reservation or charge from a bucket
	// spent beyond its capacity keeps that spend (the bucket stays in
	// 100/min): 100 spent, 16⅔ back in 10s, 1 booked and 1 charged under
	// 60/min (9, then 8 of its own left): 100/min finds 14⅔, not the 47
	// of 60/min's 8 carried.
	{"a lower limit's reservation keeps a spend it cannot hold", core.PerMinute(100), 10 * time.Second, true, []debtStep{
		{op: "take", n: 100, allow: true, rem: 0, reset: time.Minute},
		{wait: 10 * time.Second, lim: core.PerMinute(60), op: "reserve", allow: true, rem: 9, reset: 51 * time.Second},
		{lim: core.PerMinute(60), op: "charge", allow: true, rem: 8, reset: 52 * time.Second},
		{op: "take", n: 14, allow: true, rem: 0, reset: 59600 * time.Millisecond},
		{op: "take", allow: false, rem: 0, retry: 200 * time.Millisecond, reset: 59600 * time.Millisecond},
	}},
	// A debt read under another limit (issue 44: the memory store
	// announced 3m20s here, the script 3.98s, and both admitted at
	// 3.98s). Of the two readings the larger holds (DESIGN §3): the limit
	// that wrote the debt repays it at its own rate, so a pause of 3s
	// written at 100 a second lasts about 3s for a reader at 1.5 a second
	// too, not the 200s its 300 tokens take at 1.5 a second.
	{"a debt read under another limit", core.PerSecond(100), 0, false, []debtStep{
		{op: "pause", pause: 3 * time.Second, nocheck: true},
		// Admitted when 98 of 100 are back under the writer: 2 spent of 3.
		{lim: slower, op: "take", allow: false, rem: 0, retry: 3980 * time.Millisecond, reset: 4 * time.Second},
	}},
	{"a debt read under another limit, repaid", core.PerSecond(100), 0, true, []debtStep{
		{op: "pause", pause: 3 * time.Second, nocheck: true},
		{wait: 3970 * time.Millisecond, lim: slower, op: "take", allow: false, rem: 0, retry: 10 * time.Millisecond, reset: 30 * time.Millisecond},
		{wait: 10 * time.Millisecond, lim: slower, op: "take", allow: true, rem: 0, reset: 2 * time.Second},
	}},
	// Default MaxWait 0: nothing is booked ahead.
	{"book, owe and cancel on a moving clock", core.PerSecond(10), time.Second, false, []debtStep{
		{op: "reserve", n: 10, allow: true, rem: 0, reset: time.Second},
		{op: "reserve", n: 5, allow: true, rem: 0, retry: 500 * time.Millisecond, reset: 1500 * time.Millisecond},
		{op: "take", allow: false, rem: 0, retry: 600 * time.Millisecond, reset: 1500 * time.Millisecond},
		{op: "cancel", of: 1, nocheck: true},
		{op: "take", allow: false, rem: 0, retry: 100 * time.Millisecond, reset: time.Second},
		{op: "charge", n: 25, allow: true, rem: 0, retry: 1100 * time.Millisecond, reset: 2 * time.Second},
		{op: "take", allow: false, rem: 0, retry: 1100 * time.Millisecond, reset: 2 * time.Second},
	}},
	// A pause may owe more than a charge can: a charge then forgives all
	// it takes and leaves the debt as it is (it never gives tokens back).
	{"a charge keeps a pause's deeper debt", core.PerSecond(10), 0, false, []debtStep{
		{op: "pause", pause: 3 * time.Second, nocheck: true},
		{op: "charge", n: 5, allow: true, rem: 0, retry: 3100 * time.Millisecond, reset: 4 * time.Second},
		{op: "take", allow: false, rem: 0, retry: 3100 * time.Millisecond, reset: 4 * time.Second},
	}},
	{"MaxWait 0 books nothing ahead", core.PerMinute(2), 0, false, []debtStep{
		{op: "reserve", n: 2, allow: true, rem: 0, reset: time.Minute},
		{op: "reserve", allow: false, rem: 0, retry: 30 * time.Second, reset: time.Minute},
		{op: "take", allow: false, rem: 0, retry: 30 * time.Second, reset: time.Minute},
		// A charge owes at most one burst.
		{op: "charge", n: 5, allow: true, rem: 0, retry: 90 * time.Second, reset: 2 * time.Minute},
		{op: "take", allow: false, rem: 0, retry: 90 * time.Second, reset: 2 * time.Minute},
	}},
}

func TestDebtConformance(t *testing.T) {
	for storeName, mk := range stores(t) {
		if storeName == "cluster" || storeName == "sentinel" {
			continue // the same script as "redis"
		}
		t.Run(storeName, func(t *testing.T) {
			for _, tc := range debtCases {
				t.Run(tc.name, func(t *testing.T) {
					s := mk(t)
					if s.realTime && tc.stopped {
						t.Skip("needs a stopped clock")
					}
					if !s.realTime {
						t.Parallel()
					}
					cfg := core.Config{Store: s.store, Limit: tc.limit, Name: "conf", FailMode: core.FailClosed, MaxWait: tc.maxWait, Timeout: 5 * time.Second}
					if !s.realTime {
						cfg.DenyCacheSize = -1 // it counts on this process's clock, which the test does not move
					}
					l, err := core.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					runDebt(t, s, l, tc.steps)
				})
			}
		})
	}
}

func runDebt(t *testing.T, s clockStore, l *core.Limiter, steps []debtStep) {
	t.Helper()
	ctx := context.Background()
	res := map[int]*core.Reservation{}
	slack := time.Duration(0)
	if s.realTime {
		slack = 250 * time.Millisecond
	}
	for i, st := range steps {
		if st.wait != 0 {
			s.advance(st.wait)
		}
		v := l
		if st.lim != (core.Limit{}) {
			var err error
			if v, err = l.With(st.lim); err != nil {
				t.Fatal(err)
			}
		}
		n := max(st.n, 1)
		var got core.Result
		var err error
		wait := time.Duration(0)
		switch st.op {
		case "take":
			got, err = v.AllowN(ctx, "k", n)
			wait = got.RetryAfter
		case "reserve":
			var r *core.Reservation
			r, err = v.ReserveN(ctx, "k", n)
			if err == nil {
				res[i], got = r, r.Result()
				wait = got.RetryAfter
				if r.OK() {
					wait = r.Booked()
				}
			}
		case "cancel":
			err = res[st.of].Cancel(ctx)
		case "charge":
			got, err = v.Charge(ctx, "k", n)
			wait = got.RetryAfter
		case "pause":
			got, err = v.Pause(ctx, "k", st.pause)
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.op, err)
		}
		if st.nocheck {
			continue
		}
		if got.Allowed != st.allow || got.Remaining != st.rem || got.Degraded {
			t.Errorf("step %d (%s): got allowed=%v remaining=%d degraded=%v, want %v %d", i, st.op, got.Allowed, got.Remaining, got.Degraded, st.allow, st.rem)
		}
		if wait > st.retry || wait < st.retry-slack {
			t.Errorf("step %d (%s): wait %v, want %v", i, st.op, wait, st.retry)
		}
		if got.ResetAfter > st.reset || got.ResetAfter < st.reset-slack {
			t.Errorf("step %d (%s): ResetAfter %v, want %v", i, st.op, got.ResetAfter, st.reset)
		}
	}
}

// WaitN fails at once, booking nothing, past MaxWait or the context's
// deadline, with an error that says how long.
func TestWaitNTooLong(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(1), FailMode: core.FailClosed, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = l.Wait(dctx, "k")
	var we *core.WaitError
	if !errors.Is(err, core.ErrWaitTooLong) || !errors.As(err, &we) || we.Wait < 59*time.Second || we.Max > 10*time.Second {
		t.Fatalf("got %v (%+v), want a WaitError of about a minute against 10s", err, we)
	}
	// Nothing was booked: a reservation still waits one minute, not two.
	r, err := l.ReserveN(ctx, "k", 1)
	if err != nil || !r.OK() || r.Booked() > time.Minute {
		t.Fatalf("got %v %v %v, want booked within a minute", r.OK(), r.Booked(), err)
	}
}

// A WaitN whose context ends while it sleeps gives its booking back.
func TestWaitNCancelledGivesBack(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(1), FailMode: core.FailClosed, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- l.Wait(wctx, "k") }()
	// Wait for the booking: the next reservation waits two minutes.
	for {
		r, err := l.With(core.PerMinute(1))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := r.Peek(ctx, "k", 1); got.RetryAfter > 61*time.Second {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	got, _ := l.Peek(ctx, "k", 1)
	if got.RetryAfter > time.Minute {
		t.Fatalf("after the cancelled wait: RetryAfter %v, want at most a minute (the booking given back)", got.RetryAfter)
	}
}

func ExampleLimiter_Charge() {
	l, _ := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(100), FailMode: core.FailOpen})
	ctx := context.Background()
	// A response reported 150 tokens used: the bucket owes 50.
	r, _ := l.Charge(ctx, "tenant-1", 150)
	fmt.Println(r.Allowed, r.Remaining, r.RetryAfter.Round(100*time.Millisecond))
	// Later requests wait until the refill repays the debt.
	r, _ = l.Allow(ctx, "tenant-1")
	fmt.Println(r.Allowed, r.RetryAfter.Round(100*time.Millisecond))
	// Output:
	// true 0 500ms
	// false 500ms
}

// sendTwice is a go-redis hook that sends every script call twice, as
// go-redis re-sends a call whose reply was lost.
type sendTwice struct{}

func (sendTwice) DialHook(next redis.DialHook) redis.DialHook { return next }
func (sendTwice) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (sendTwice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Every waiting operation counts once when its script call is sent
// twice: the second run finds the call's replay record.
func TestWaitingResentOnce(t *testing.T) {
	for _, name := range []string{"miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			var c *redis.Client
			if name == "miniredis" {
				m := miniredis.RunT(t)
				c = redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { c.Close() })
			} else {
				c = redistest.Client(t)
			}
			c.AddHook(sendTwice{})
			l, err := core.New(core.Config{
				Store: core.NewRedisStore(c, core.WithPrefix(redistest.Prefix(t))), Limit: core.PerMinute(10),
				FailMode: core.FailClosed, MaxWait: time.Minute, Timeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			left := func(want int, what string) {
				t.Helper()
				if got, _ := l.Peek(ctx, "k", 1); got.Remaining != want || got.Degraded {
					t.Fatalf("after %s: %d left (%+v), want %d", what, got.Remaining, got, want)
				}
			}
			if r, err := l.ReserveN(ctx, "k", 4); err != nil || !r.OK() {
				t.Fatal(r, err)
			}
			left(6, "a reservation of 4")
			if _, err := l.Charge(ctx, "k", 3); err != nil {
				t.Fatal(err)
			}
			left(3, "a charge of 3")
			r, err := l.ReserveN(ctx, "k", 5) // owes 2: 12 s away
			if err != nil || !r.OK() || r.Booked() < 11*time.Second {
				t.Fatal(r, err)
			}
			if got, _ := l.Peek(ctx, "k", 1); got.RetryAfter < 17*time.Second {
				t.Fatalf("owing 2: RetryAfter %v, want about 18s", got.RetryAfter)
			}
			if err := r.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			left(3, "a cancel of 5")
		})
	}
}

// A denial under a changed limit still writes nothing (DESIGN §3): the
// clamp it refills from is read from the stored bucket, not written.
func TestLoweredLimitDenialWritesNothing(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	s := core.NewRedisStore(c)
	ctx := context.Background()
	p100 := []core.Policy{policyOf(t, "conf", core.PerMinute(100))}
	p60 := []core.Policy{policyOf(t, "conf", core.PerMinute(60))}
	if o, err := s.Take(ctx, "k", 100, p100, nil); err != nil || !o.Allowed {
		t.Fatal(o, err)
	}
	before, _ := c.Get(ctx, s.Key("conf", "k")).Result()
	keys := len(m.Keys())
	o, err := s.Take(ctx, "k", 1, p60, nil)
	if err != nil || o.Allowed || o.RetryAfter > time.Second {
		t.Fatalf("lowered: %+v %v, want denied for at most 1s", o, err)
	}
	if after, _ := c.Get(ctx, s.Key("conf", "k")).Result(); after != before || len(m.Keys()) != keys {
		t.Fatalf("the denial wrote: %q → %q, %d → %d keys", before, after, keys, len(m.Keys()))
	}
}

// A debt written under one limit is read alike by every store under
// another limit of the same name: the waits announced, and the time
// the first request is admitted (issue 44).
func TestDebtUnderAnotherLimitStoresAgree(t *testing.T) {
	lims := []core.Limit{core.PerSecond(1), core.PerSecond(100), core.PerMinute(3), core.PerDay(123457), core.PerSecond(1).WithBurst(20)}
	ctx := context.Background()
	for _, a := range lims {
		for _, b := range lims {
			for _, op := range []string{"charge", "pause", "reserve"} {
				var got [2]string
				for i, storeName := range []string{"memory", "miniredis"} {
					s := stores(t)[storeName](t)
					l, err := core.New(core.Config{Store: s.store, Limit: a, Name: "conf", FailMode: core.FailClosed, MaxWait: 10 * time.Second, Timeout: 5 * time.Second, DenyCacheSize: -1})
					if err != nil {
						t.Fatal(err)
					}
					switch op {
					case "charge":
						_, err = l.Charge(ctx, "k", 1e6)
					case "pause":
						_, err = l.Pause(ctx, "k", 200*time.Second)
					case "reserve":
						_, err = l.ReserveN(ctx, "k", a.Rate)
						if err == nil {
							_, err = l.ReserveN(ctx, "k", a.Rate)
						}
					}
					if err != nil {
						t.Fatal(err)
					}
					v, err := l.With(b)
					if err != nil {
						t.Fatal(err)
					}
					s.advance(time.Millisecond)
					first, _ := v.AllowN(ctx, "k", 1)
					s.advance(first.RetryAfter)
					then, _ := v.AllowN(ctx, "k", 1)
					if !first.Allowed && !then.Allowed {
						t.Errorf("%s: %v under %v after a %s: refused at the RetryAfter announced (%v)", storeName, a, b, op, first.RetryAfter)
					}
					got[i] = fmt.Sprintf("retry %v reset %v, then allowed=%v", first.RetryAfter, first.ResetAfter, then.Allowed)
				}
				if got[0] != got[1] {
					t.Errorf("%v under %v after a %s: memory %s; Redis %s", a, b, op, got[0], got[1])
				}
			}
		}
	}
}
