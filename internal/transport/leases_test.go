package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestLeaseBatchResent: one call carries the acquires of three ids on a
// key of Max 2, in order: the first two get the slots, the third is
// refused, each with its own answer (with a Rate, its own tokens). When
// go-redis sends the call again (its reply lost), the second run finds
// the ids already held: the same answers, no slot or token taken twice.
func TestLeaseBatchResent(t *testing.T) {
	for _, withRate := range []bool{false, true} {
		t.Run(fmt.Sprint("rate=", withRate), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
			t.Cleanup(func() { client.Close() })
			s := New(client, redistest.Prefix(t))
			var policies []bucket.Policy
			if withRate {
				policies = []bucket.Policy{PerHour(5).policy("batch-rate")}
			}
			// Loaded: every call is an EVALSHA, which the hook sends twice.
			if err := s.Preload(context.Background(), AcquireLease, AcquireWithRate); err != nil {
				t.Fatal(err)
			}
			h := &resendLeases{}
			client.AddHook(h)
			var ws []*leaseWaiter
			for _, id := range []string{"a", "b", "c"} {
				req := &bucket.LeaseAsk{Name: "batch", Subj: bucket.HashSubject("k"), ID: id, Max: 2, Lease: 30 * time.Second, Timeout: 5 * time.Second}
				if policies != nil {
					req.Policies = policies
					req.Each = make([]bucket.Outcome, len(policies))
				}
				ws = append(ws, &leaseWaiter{ctx: context.Background(), req: req, deadline: time.Now().Add(5 * time.Second), done: make(chan struct{}, 1)})
			}
			s.acquireCalls(nil, ws, false)
			for i, w := range ws {
				a, err := w.wait()
				if err != nil || a.Allowed != (i < 2) {
					t.Fatalf("id %s: %+v, %v; want allowed %v", w.req.ID, a, err, i < 2)
				}
				// Tokens taken in turn; a refused slot only peeks at them.
				if policies != nil && (!w.req.Rate.Allowed || w.req.Rate.Remaining != []int64{4, 3, 3}[i]) {
					t.Fatalf("id %s: tokens %+v", w.req.ID, w.req.Rate)
				}
			}
			if len(h.replies) != 2 || h.replies[0] != h.replies[1] {
				t.Fatalf("replies %q; want one call sent twice, answered the same", h.replies)
			}
			held, err := client.ZRange(context.Background(), s.LeaseKey(bucket.HashSubject("k"), "batch"), 0, -1).Result()
			if err != nil || strings.Join(held, ",") != "a,b" {
				t.Fatalf("leases held %v, %v; want a,b", held, err)
			}
			if policies != nil {
				r, err := s.Peek(context.Background(), "k", 1, policies, make([]bucket.Outcome, 1))
				if err != nil || r.Remaining != 3 {
					t.Fatalf("tokens left %+v, %v; want 3 of 5 (two taken, once each)", r, err)
				}
			}
		})
	}
}

// resendLeases is a go-redis hook that sends every acquire call twice, as
// go-redis does when the first reply is lost, and keeps what each run
// answered of the slots and tokens: allowed, and the tokens left (the
// leases held and the times of a second run move on).
type resendLeases struct {
	mu      sync.Mutex
	replies []string
}

func (*resendLeases) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resendLeases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || !strings.EqualFold(cmd.Name(), "evalsha") || (args[1] != AcquireLease.Hash() && args[1] != AcquireWithRate.Hash()) {
			return next(ctx, cmd)
		}
		for range 2 {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			v, _ := cmd.(*redis.Cmd).Slice()
			per := 5
			if args[1] == AcquireWithRate.Hash() {
				per = 6
			}
			var b strings.Builder
			for i := 0; i+per <= len(v); i += per {
				fmt.Fprint(&b, v[i], " ") // allowed
				if per == 6 {
					// The tokens' allowed and remaining.
					f := strings.SplitN(fmt.Sprint(v[i+5]), ",", 3)
					fmt.Fprint(&b, f[:2], " ")
				}
			}
			h.mu.Lock()
			h.replies = append(h.replies, b.String())
			h.mu.Unlock()
		}
		return nil
	}
}
func (*resendLeases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLeaseBatchSettles: what a call's answers become, per acquire. A
// caller still waiting gets its answer; one that left gets nothing, and
// its slot, if granted, is taken back; a failed call's acquires are all
// taken back (the script may have run), a call never made
// (bucket.Overloaded) takes nothing back. All in one ZREM.
func TestLeaseBatchSettles(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { client.Close() })
	s := New(client, redistest.Prefix(t))
	h := &zremHook{removed: make(chan []any, 1)}
	client.AddHook(h)
	granted, refused := bucket.LeaseAnswer{Allowed: true, Held: 1}, bucket.LeaseAnswer{Held: 2}
	for _, tc := range []struct {
		name string
		err  error
		back string
	}{
		{"answered", nil, "[left-granted]"},
		{"failed", errors.New("connection reset"), "[waiting left-granted left-refused]"},
		{"overloaded", bucket.Overloaded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws []*leaseWaiter
			for _, id := range []string{"waiting", "left-granted", "left-refused"} {
				req := &bucket.LeaseAsk{Name: "settle", Subj: "k", ID: id, Timeout: time.Second}
				w := &leaseWaiter{ctx: context.Background(), req: req, deadline: time.Now().Add(time.Minute), done: make(chan struct{}, 1)}
				if id != "waiting" {
					w.state.Store(waiterLeft)
				}
				ws = append(ws, w)
			}
			if next := s.answer(nil, ws, []bucket.LeaseAnswer{granted, granted, refused}, tc.err); next != nil {
				t.Fatalf("answer with no queues returned %d acquires waiting", len(next))
			}
			a, err := ws[0].wait()
			if !errors.Is(err, tc.err) || (tc.err == nil && a != granted) {
				t.Fatalf("waiting caller got %+v, %v; want %+v, %v", a, err, granted, tc.err)
			}
			for _, w := range ws[1:] {
				select {
				case <-w.done:
					t.Fatalf("%s answered after its caller left", w.req.ID)
				default:
				}
			}
			if tc.back == "" {
				return // nothing to take back: answer sends no ZREM
			}
			if got := fmt.Sprint(<-h.removed); got != tc.back {
				t.Fatalf("taken back %s, want %s", got, tc.back)
			}
		})
	}
	select {
	case ids := <-h.removed:
		t.Fatalf("taken back %v after a call never made", ids)
	default:
	}
}

// zremHook sends the members of every ZREM to removed.
type zremHook struct{ removed chan []any }

func (*zremHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *zremHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.EqualFold(cmd.Name(), "zrem") {
			h.removed <- cmd.Args()[2:]
		}
		return err
	}
}
func (*zremHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLeaseQueues: the first acquire of a key starts its call; those
// arriving while it is in flight wait for the next, which takes the ones
// whose callers still wait, at most maxLeaseBatch, in order; once none
// waits, the key has no call in flight.
func TestLeaseQueues(t *testing.T) {
	var qs LeaseQueues
	waiter := func(subj string) *leaseWaiter { return &leaseWaiter{req: &bucket.LeaseAsk{Subj: subj}} }
	first := waiter("k")
	if qs.join(first) {
		t.Fatal("the first acquire of k waits for a call")
	}
	if qs.join(waiter("other")) {
		t.Fatal("an acquire of another key waits for k's call")
	}
	var ws []*leaseWaiter
	for i := range maxLeaseBatch + 2 {
		w := waiter("k")
		if !qs.join(w) {
			t.Fatalf("acquire %d of k starts a call while one is in flight", i+2)
		}
		ws = append(ws, w)
	}
	ws[0].state.Store(waiterLeft)
	next := qs.next("k")
	if len(next) != maxLeaseBatch || next[0] != ws[1] || next[len(next)-1] != ws[maxLeaseBatch] {
		t.Fatalf("next call of k carries %d acquires; want the %d still waiting, in order", len(next), maxLeaseBatch)
	}
	if next = qs.next("k"); len(next) != 1 || next[0] != ws[maxLeaseBatch+1] {
		t.Fatalf("the call after carries %d acquires, want the last one", len(next))
	}
	if next = qs.next("k"); next != nil || qs.join(waiter("k")) {
		t.Fatalf("k has a call in flight with no acquire waiting: %d", len(next))
	}
}
