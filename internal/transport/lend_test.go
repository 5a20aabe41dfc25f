package transport

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// lend asks s for OpLend on subject: return loan ret (0: none) with back
// tokens unspent per policy, and borrow loan id (0: none) of want tokens
// per policy, for term.
func (s *Store) lend(t *testing.T, subject string, ps []bucket.Policy, ret uint64, back []int64, id uint64, want []int64, term time.Duration) bucket.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, _ := ctx.Deadline()
	if back == nil {
		back = make([]int64, len(ps))
	}
	if want == nil {
		want = make([]int64, len(ps))
	}
	each := make([]bucket.Outcome, len(ps))
	o, err := s.Do(ctx, bucket.Ask{Op: bucket.WithArg(bucket.OpLend, term.Microseconds()), Subj: bucket.HashSubject(subject), N: 1,
		Policies: ps, Each: each, Deadline: d, Lend: &bucket.Lend{Return: ret, Back: back, ID: id, Want: want}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestLendLifecycle: a slice lent leaves the bucket's level short of it,
// and its refill short of the burst, until the loan is returned (its
// unspent tokens back, once) or ends; a bucket that cannot spare a slice
// lends none.
func TestLendLifecycle(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, redistest.Prefix(t))
	ps := mustPolicies(t, NamedLimit{Name: "h", Limit: PerMinute(60)}) // a token a second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o := s.lend(t, "k", ps, 0, nil, 7, []int64{40}, time.Minute)
	if !o.Allowed || o.Remaining != 20 {
		t.Fatalf("borrow of 40 from 60: %+v, want lent, 20 left", o)
	}
	if v := c.Get(ctx, s.Key(bucket.HashSubject("k"), "h")).Val(); !strings.Contains(v, ";7,40,") {
		t.Fatalf("bucket %q does not record loan 7 of 40", v)
	}
	if o := s.lend(t, "k", ps, 0, nil, 8, []int64{21}, time.Minute); o.Allowed || o.Remaining != 20 {
		t.Fatalf("borrow of 21 from 20: %+v, want none lent", o)
	}
	if o, _ := s.Take(ctx, "k", 20, ps, nil); !o.Allowed || o.Remaining != 0 {
		t.Fatalf("take 20: %+v", o)
	}
	if o, _ := s.Take(ctx, "k", 1, ps, nil); o.Allowed {
		t.Fatalf("take past the level: %+v", o)
	}
	// Loan 7 returned with 15 unspent: 15 back, once.
	if o := s.lend(t, "k", ps, 7, []int64{15}, 0, nil, time.Minute); !o.Allowed || o.Remaining != 15 {
		t.Fatalf("return of 15: %+v, want 15 left", o)
	}
	if o := s.lend(t, "k", ps, 7, []int64{15}, 0, nil, time.Minute); o.Allowed || o.Remaining != 15 {
		t.Fatalf("second return: %+v, want nothing back", o)
	}
	if v := c.Get(ctx, s.Key(bucket.HashSubject("k"), "h")).Val(); strings.Contains(v, ";") {
		t.Fatalf("bucket %q still records a loan", v)
	}
	// A loan that ends: its tokens are gone at its end, spent or not.
	if o := s.lend(t, "k", ps, 0, nil, 9, []int64{10}, 20*time.Millisecond); !o.Allowed || o.Remaining != 5 {
		t.Fatalf("borrow of 10: %+v", o)
	}
	time.Sleep(50 * time.Millisecond)
	if o, _ := s.Peek(ctx, "k", 1, ps, nil); o.Remaining != 5 {
		t.Fatalf("after the loan's end: %+v, want 5 left", o)
	}
	if o := s.lend(t, "k", ps, 9, []int64{10}, 0, nil, time.Minute); o.Allowed {
		t.Fatalf("return after the loan's end: %+v, want nothing back", o)
	}
}
