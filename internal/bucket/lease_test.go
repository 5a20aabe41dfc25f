package bucket

import (
	"testing"
	"time"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	var ls Leases
	ask := func(id string) *LeaseAsk {
		return &LeaseAsk{Name: "n", Subj: "s", ID: id, Max: 2, Lease: 10 * time.Microsecond}
	}
	if a := ls.Acquire(100, ask("a"), nil); !a.Allowed || a.Held != 1 || a.ResetAfter != 10*time.Microsecond {
		t.Fatalf("first acquire: %+v", a)
	}
	if a := ls.Acquire(104, ask("b"), nil); !a.Allowed || a.Held != 2 || a.ResetAfter != 10*time.Microsecond {
		t.Fatalf("second acquire: %+v", a)
	}
	// Full: refused until the earliest lease ends.
	if a := ls.Acquire(105, ask("c"), nil); a.Allowed || a.Held != 2 || a.RetryAfter != 5*time.Microsecond || a.ResetAfter != 9*time.Microsecond {
		t.Fatalf("third acquire: %+v", a)
	}
	// A holder asking again keeps its one slot.
	if a := ls.Acquire(105, ask("a"), nil); !a.Allowed || a.Held != 2 {
		t.Fatalf("acquire again: %+v", a)
	}
	if got := ls.Renew(108, "n", "s", "a", 10*time.Microsecond); got != Renewed {
		t.Fatalf("renew a: %v, want Renewed", got)
	}
	// b ended at 114: pruned by the next acquire, which then fits.
	if a := ls.Acquire(114, ask("c"), nil); !a.Allowed || a.Held != 2 || a.Pruned != 1 {
		t.Fatalf("acquire after b ended: %+v", a)
	}
	if got := ls.Renew(114, "n", "s", "b", time.Second); got != RenewGone {
		t.Fatalf("renew b: %v, want RenewGone", got)
	}
	if got := ls.Renew(200, "n", "s", "a", time.Second); got != RenewExpired {
		t.Fatalf("renew a past its deadline: %v, want RenewExpired", got)
	}
	ls.Release(200, "n", "s", "c")
	ls.Release(200, "n", "s", "c") // idempotent
	if a := ls.Acquire(200, ask("d"), nil); !a.Allowed || a.Held != 1 {
		t.Fatalf("acquire after release: %+v", a)
	}
}

// TestLeasesWithRate: a slot and its tokens are taken together or not at
// all; a refused or repeated acquire only peeks.
func TestLeasesWithRate(t *testing.T) {
	t.Parallel()
	var ls Leases
	var ops []int
	tokens := true
	decide := func(op int) bool { ops = append(ops, op); return tokens }
	a := &LeaseAsk{Name: "n", Subj: "s", ID: "a", Max: 1, Lease: time.Second}
	if got := ls.Acquire(0, a, decide); !got.Allowed {
		t.Fatalf("acquire: %+v", got)
	}
	a.ID = "b"
	if got := ls.Acquire(0, a, decide); got.Allowed {
		t.Fatalf("acquire past Max: %+v", got)
	}
	ls.Release(0, "n", "s", "a")
	tokens = false
	if got := ls.Acquire(0, a, decide); got.Allowed || got.Held != 0 {
		t.Fatalf("acquire without tokens: %+v", got)
	}
	if want := []int{OpTake, OpPeek, OpTake}; len(ops) != len(want) || ops[0] != want[0] || ops[1] != want[1] || ops[2] != want[2] {
		t.Fatalf("decide saw %v, want %v", ops, want)
	}
}

// TestLeasesSweep: sets whose leases all ended are dropped by the shard's
// next sweep, a minute on.
func TestLeasesSweep(t *testing.T) {
	t.Parallel()
	var ls Leases
	for i := range 100 {
		ls.Acquire(0, &LeaseAsk{Name: "n", Subj: string(rune('a'+i%26)) + string(rune('a'+i/26)), ID: "x", Max: 1, Lease: time.Microsecond}, nil)
	}
	swept := map[*leaseShard]bool{}
	for i := 0; len(swept) < len(ls.shards); i++ {
		sh, _ := ls.lock("other", string(rune(i)), leaseSweep+1)
		sh.mu.Unlock()
		swept[sh] = true
	}
	for i := range ls.shards {
		if n := len(ls.shards[i].sets); n != 0 {
			t.Errorf("shard %d: %d sets after a sweep", i, n)
		}
	}
}
