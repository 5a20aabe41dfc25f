package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
)

// FailMode decides waits while the store cannot: FailOpen lets WaitN
// through at once, FailClosed fails it at once, FailLocal books in the
// in-process bucket (an instance's share: here all of it).
func TestWaitFailModes(t *testing.T) {
	for _, tc := range []struct {
		mode    core.FailMode
		wantErr error
	}{
		{core.FailOpen, nil},
		{core.FailClosed, core.ErrUnavailable},
		{core.FailLocal, nil},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			defer c.Close()
			m.Close() // down from the start
			l, err := core.New(core.Config{
				Store: core.NewRedisStore(c), Limit: core.PerSecond(2), FailMode: tc.mode, Instances: 1,
				MaxWait: 5 * time.Second, Timeout: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := l.WaitN(ctx, "k", 2); !errors.Is(err, tc.wantErr) {
				t.Fatalf("WaitN: %v, want %v", err, tc.wantErr)
			}
			r, err := l.ReserveN(ctx, "k", 1)
			if err != nil || !r.Result().Degraded {
				t.Fatalf("ReserveN: %+v %v, want degraded", r, err)
			}
			switch tc.mode {
			case core.FailOpen:
				if !r.OK() || r.Delay() != 0 {
					t.Fatalf("FailOpen: OK %v, Delay %v; want through at once", r.OK(), r.Delay())
				}
			case core.FailClosed:
				if r.OK() {
					t.Fatal("FailClosed booked")
				}
			case core.FailLocal:
				// The local bucket holds 2, both taken: booked ahead.
				if !r.OK() || r.Booked() <= 0 || !r.Result().Fallback {
					t.Fatalf("FailLocal: OK %v, booked %v; want a booking in the local bucket", r.OK(), r.Booked())
				}
				if err := r.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				if r2, _ := l.ReserveN(ctx, "k", 1); r2.Booked() > r.Booked() {
					t.Fatalf("after the cancel, booked %v ahead, want at most %v: given back locally", r2.Booked(), r.Booked())
				}
			}
			res, err := l.Charge(ctx, "k", 1)
			if err != nil || !res.Allowed || !res.Degraded {
				t.Fatalf("Charge: %+v %v, want allowed, degraded", res, err)
			}
		})
	}
}

// With is the one way a per-request limit reaches every verb: the view
// decides under its limit, in the same buckets, and is made once.
func TestWithReachesEveryVerb(t *testing.T) {
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerMinute(10), Name: "plan", FailMode: core.FailClosed, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pro, err := l.With(core.PerMinute(100))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := l.With(core.PerMinute(100)); again != pro {
		t.Fatal("With made a second view of one limit")
	}
	if same, _ := l.With(core.PerMinute(10)); same != l {
		t.Fatal("With(Config.Limit) is not l")
	}
	if pro.Limit() != core.PerMinute(100) || pro.Name() != "plan" {
		t.Fatalf("view: %v %q", pro.Limit(), pro.Name())
	}
	if res, _ := pro.AllowN(ctx, "k", 50); !res.Allowed || res.Remaining != 50 || res.Limit != core.PerMinute(100) {
		t.Fatalf("AllowN under the view: %+v", res)
	}
	// The same bucket: 50 spent, so 10 a minute has nothing left.
	if res, _ := l.Peek(ctx, "k", 1); res.Allowed {
		t.Fatalf("the base limiter: %+v, want the spending carried over", res)
	}
	if res, _ := pro.Refund(ctx, "k", 10); res.Remaining != 60 {
		t.Fatalf("Refund under the view: %+v", res)
	}
	if res, _ := pro.Charge(ctx, "k", 60); res.Remaining != 0 {
		t.Fatalf("Charge under the view: %+v", res)
	}
	r, err := pro.ReserveN(ctx, "k", 1)
	if err != nil || !r.OK() || r.Booked() > 600*time.Millisecond+time.Millisecond {
		t.Fatalf("ReserveN under the view: %v %v %v", r.OK(), r.Booked(), err)
	}
	if _, err := l.With(core.Limit{}); !errors.Is(err, core.ErrInvalidLimit) {
		t.Fatalf("With(invalid): %v", err)
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = l.With(core.PerMinute(100)) })
	if allocs != 0 {
		t.Fatalf("With allocates %v times once its view exists", allocs)
	}
}

// waitEvents is a WaitObserver keeping its events.
type waitEvents struct {
	decisions int
	waits     []core.WaitEvent
}

func (w *waitEvents) Decision(core.DecisionEvent) { w.decisions++ }
func (w *waitEvents) BreakerChange(string, bool)  {}
func (w *waitEvents) Waited(e core.WaitEvent)     { w.waits = append(w.waits, e) }

// A WaitObserver sees bookings (and their delay) and charges (and what
// was forgiven), with no key.
func TestWaitObserver(t *testing.T) {
	obs := &waitEvents{}
	l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(10), Name: "api", FailMode: core.FailClosed, MaxWait: time.Second, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.ReserveN(ctx, "k", 10)
	l.ReserveN(ctx, "k", 5)
	l.ReserveN(ctx, "k", 10) // refused: 1.5 s
	l.Charge(ctx, "k", 20)   // would owe 25, at most 10: about 15 forgiven
	if len(obs.waits) != 4 {
		t.Fatalf("%d events, want 4: %+v", len(obs.waits), obs.waits)
	}
	w := obs.waits
	if !w[0].Booked || w[0].Delay != 0 || !w[1].Booked || w[1].Delay < 490*time.Millisecond || w[2].Booked || w[2].Policy != "api" {
		t.Errorf("bookings: %+v", w[:3])
	}
	if !w[3].Charge || w[3].Forgiven < 14 {
		t.Errorf("charge: %+v, want about 15 forgiven", w[3])
	}
}

// A FailLocal wait that the in-process bucket could only serve past
// MaxWait is too long, as it would be on the store: ErrWaitTooLong with a
// *WaitError saying how long, not ErrUnavailable (nothing is unavailable).
func TestWaitFailLocalTooLong(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer c.Close()
	m.Close() // down from the start
	l, err := core.New(core.Config{
		Store: core.NewRedisStore(c), Limit: core.PerSecond(2), FailMode: core.FailLocal, Instances: 1,
		MaxWait: time.Second, Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.WaitN(ctx, "k", 2); err != nil { // the local burst
		t.Fatal(err)
	}
	if r, _ := l.ReserveN(ctx, "k", 2); !r.OK() { // owed 1 s ahead
		t.Fatalf("the second booking: %+v", r.Result())
	}
	err = l.WaitN(ctx, "k", 2) // 2 s ahead: more than MaxWait
	var we *core.WaitError
	if !errors.Is(err, core.ErrWaitTooLong) || errors.Is(err, core.ErrUnavailable) || !errors.As(err, &we) || we.Wait <= time.Second {
		t.Fatalf("WaitN: %v, want ErrWaitTooLong saying more than 1s", err)
	}
}
