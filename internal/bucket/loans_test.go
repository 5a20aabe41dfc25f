package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// loanRun is one random schedule of borrows, decisions from slices,
// returns, expiries and plain decisions, across simulated instances
// sharing one Lender, and what it admitted.
type loanRun struct {
	p        Policy
	admitted []admission // in time order
	local    int         // admissions decided from slices
	lent     int         // slices lent
	refused  int         // borrows the bucket could not spare
	late     int         // returns that gave nothing: after their loan ended, or re-sent
}

type admission struct{ at, units int64 }

// A message on its way to the store: a borrow or a return.
type loanMsg struct {
	at       int64 // arrival at the store
	inst     int
	borrow   bool
	id       uint64
	sentAt   int64 // a borrow's: the instance's loan ends term after it
	unspent  int64 // a return's
	replyLag int64 // a borrow's: until its answer reaches the instance
}

// slice is an instance's loan as the instance sees it.
type slice struct {
	id         uint64
	left       int64 // units
	usableFrom int64 // the answer arrived
	end        int64 // sentAt + term: the instance's own loan end
}

// What a schedule breaks on purpose, so that the property test shows it
// can fail: each of the Lender's rules in turn.
const (
	breakNothing    = iota
	breakCap        // the refill ignores the loans
	breakLoanEnd    // an instance decides from its slice past the store's loan end
	breakLateReturn // a return counts after its loan ended, or twice
)

// runLoans drives one schedule from seed, breaking what broken says.
func runLoans(seed uint64, broken int) loanRun {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	periods := []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second, time.Minute}
	period := periods[rng.IntN(len(periods))]
	rate := 1 + rng.IntN(20)
	burst := 1 + rng.IntN(3*rate)
	ps, _ := Policies(NamedLimit{Name: "p", Limit: Limit{Rate: rate, Period: period, Burst: burst}})
	run := loanRun{p: ps[0]}
	p := &run.p
	periodUS := period.Microseconds()
	term := periodUS/20 + rng.Int64N(periodUS)
	sliceUnits := SliceUnits(p, term)
	maxLag := periodUS / (1 + rng.Int64N(50))
	lag := func() int64 { return rng.Int64N(maxLag + 1) }

	b := &Lender{Held: p.Capacity, uncapped: broken == breakCap}
	instances := 1 + rng.IntN(8)
	slices := make([]*slice, instances)
	borrowing := make([]bool, instances)
	var queue []loanMsg
	var now int64
	var nextID uint64
	admit := func(units int64, local bool) {
		run.admitted = append(run.admitted, admission{now, units})
		if local {
			run.local++
		}
	}
	deliver := func() {
		for {
			k := -1
			for i, m := range queue {
				if m.at <= now && (k < 0 || m.at < queue[k].at) {
					k = i
				}
			}
			if k < 0 {
				return
			}
			m := queue[k]
			queue = append(queue[:k], queue[k+1:]...)
			if m.borrow {
				borrowing[m.inst] = false
				lent, _ := b.Borrow(p, m.id, sliceUnits, term, m.at)
				if lent == 0 {
					run.refused++
					continue
				}
				run.lent++
				end := m.sentAt + term
				if broken == breakLoanEnd {
					end = m.at + term + maxLag // the store's end, and later
				}
				slices[m.inst] = &slice{id: m.id, left: lent, usableFrom: m.at + m.replyLag, end: end}
			} else if !b.Return(p, m.id, m.unspent, m.at) {
				run.late++
				if broken == breakLateReturn {
					b.Held = min(b.Held+m.unspent, p.Capacity)
				}
			}
		}
	}
	sendReturn := func(i int) {
		s := slices[i]
		slices[i] = nil
		m := loanMsg{at: now + lag(), inst: i, id: s.id, unspent: s.left}
		queue = append(queue, m)
		if rng.IntN(4) == 0 { // re-sent: must give back nothing more
			m.at += lag()
			queue = append(queue, m)
		}
	}
	for range 300 {
		now += rng.Int64N(periodUS/10 + 1)
		deliver()
		for i, s := range slices {
			if s != nil && now >= s.end {
				if rng.IntN(2) == 0 {
					sendReturn(i) // after its end: the store has dropped it, or will
				} else {
					slices[i] = nil
				}
			}
		}
		i := rng.IntN(instances)
		switch r := rng.IntN(10); {
		case r < 6: // a decision
			n := 1 + rng.IntN(min(3, burst))
			need := int64(n) * p.Unit
			if s := slices[i]; s != nil && now >= s.usableFrom && now < s.end && s.left >= need {
				s.left -= need
				admit(need, true)
			} else if b.Take(p, n, now) {
				admit(need, false)
			}
		case r < 8: // a borrow
			if slices[i] == nil && !borrowing[i] && sliceUnits > 0 {
				nextID++
				borrowing[i] = true
				queue = append(queue, loanMsg{at: now + lag(), inst: i, borrow: true, id: nextID, sentAt: now, replyLag: lag()})
			}
		default: // a return: the key cooled down
			if slices[i] != nil {
				sendReturn(i)
			}
		}
	}
	return run
}

// overAdmitted checks every window between two admissions against the
// exact bucket's envelope, Capacity + Refill a tick boundary crossed;
// it returns the windows checked, the tight ones (admitting exactly the
// envelope), and the first window over it (i < 0: none).
func (run *loanRun) overAdmitted() (windows, tight int, i, j int) {
	p := &run.p
	a := run.admitted
	for i := range a {
		var sum int64
		for j := i; j < len(a); j++ {
			sum += a[j].units
			envelope := p.Capacity + p.Refill*(a[j].at/p.Tick-a[i].at/p.Tick)
			windows++
			if sum > envelope {
				return windows, tight, i, j
			}
			if sum == envelope {
				tight++
			}
		}
	}
	return windows, tight, -1, -1
}

// TestLenderNeverOverAdmits: across random schedules of borrows,
// decisions from slices, returns (early, late, re-sent), expiries and
// plain decisions by up to 8 instances, with messages delayed, no window
// admits more than the exact bucket's envelope: zero over-admission.
func TestLenderNeverOverAdmits(t *testing.T) {
	t.Parallel()
	schedules := 3000
	if testing.Short() {
		schedules = 300
	}
	var windows, tight, local, lent, refused, late int
	for seed := range uint64(schedules) {
		run := runLoans(seed, breakNothing)
		w, ti, i, j := run.overAdmitted()
		windows, tight = windows+w, tight+ti
		local, lent, refused, late = local+run.local, lent+run.lent, refused+run.refused, late+run.late
		if i >= 0 {
			t.Fatalf("schedule %d (%+v): admissions %d..%d over the envelope", seed, run.p, i, j)
		}
	}
	if local == 0 || tight == 0 || refused == 0 || late == 0 {
		t.Fatalf("the schedules never tested what they must: %d local decisions, %d tight windows, %d borrows refused, %d late returns", local, tight, refused, late)
	}
	t.Logf("loan model: %d schedules, %d windows checked, 0 over the envelope (%d tight); %d slices lent, %d refused, %d decisions from slices, %d returns that gave nothing (late or re-sent)",
		schedules, windows, tight, lent, refused, local, late)
}

// TestLenderPropertyFindsEachRuleBroken: the same schedules find each
// of the Lender's rules, broken, over the envelope — a refill past
// Capacity − L, a slice used past the store's loan end, a return counted
// late or twice: the property test can fail, and every rule is needed.
func TestLenderPropertyFindsEachRuleBroken(t *testing.T) {
	t.Parallel()
	for _, broken := range []struct {
		rule int
		name string
	}{{breakCap, "refill past Capacity − L"}, {breakLoanEnd, "a slice used past the store's loan end"}, {breakLateReturn, "a return counted late or twice"}} {
		found := -1
		for seed := range uint64(3000) {
			run := runLoans(seed, broken.rule)
			if _, _, i, _ := run.overAdmitted(); i >= 0 {
				found = int(seed)
				break
			}
		}
		if found < 0 {
			t.Errorf("%s: no schedule over the envelope", broken.name)
			continue
		}
		t.Logf("%s: schedule %d over the envelope", broken.name, found)
	}
}

// TestLenderWithoutLoansIsTheBucket: with nothing lent, a Lender decides
// every take as the plain bucket does.
func TestLenderWithoutLoansIsTheBucket(t *testing.T) {
	t.Parallel()
	ps, _ := Policies(NamedLimit{Name: "p", Limit: PerSecond(7).WithBurst(3)})
	p := &ps[0]
	rng := rand.New(rand.NewPCG(1, 2))
	b := &Lender{Held: p.Capacity}
	units, ts := p.Capacity, int64(0)
	var now int64
	for k := range 10000 {
		now += rng.Int64N(300000)
		n := 1 + rng.IntN(3)
		tokens := p.refill(units, ts, now)
		want := tokens >= int64(n)*p.Unit
		if want {
			units, ts = tokens-int64(n)*p.Unit, now
		}
		if got := b.Take(p, n, now); got != want {
			t.Fatalf("take %d: %v, want %v", k, got, want)
		}
	}
}

// TestLenderLoanLifecycle: a borrow lends a whole slice or nothing; the
// refill stops L short of the burst; a return gives back the unspent
// units once; a loan's end frees the cap.
func TestLenderLoanLifecycle(t *testing.T) {
	t.Parallel()
	ps, _ := Policies(NamedLimit{Name: "p", Limit: PerSecond(10)})
	p := &ps[0]
	tok := p.Unit
	b := &Lender{Held: p.Capacity}
	slice := SliceUnits(p, 400000) // 4 tokens in 0.4 s
	if slice != 4*tok {
		t.Fatalf("slice %d units, want 4 tokens (%d)", slice, 4*tok)
	}
	if lent, level := b.Borrow(p, 1, slice, 2000000, 0); lent != slice || level != 6*tok {
		t.Fatalf("borrow: lent %d, level %d; want %d, %d", lent, level, slice, 6*tok)
	}
	if !b.Take(p, 6, 0) || b.Take(p, 1, 0) {
		t.Fatal("the level after the loan is 6 tokens")
	}
	if lent, _ := b.Borrow(p, 2, slice, 2000000, 0); lent != 0 {
		t.Fatal("an empty bucket lent a slice")
	}
	// A second later 10 tokens have refilled, but the level is capped at
	// 10 − 4 while the loan is out.
	if !b.Take(p, 6, 1000000) || b.Take(p, 1, 1000000) {
		t.Fatal("the refill passed Capacity − L")
	}
	// The loan ends at 2 s: 6 by then, and 3 more in the next 0.3 s.
	b.advance(p, 2300000)
	if b.Level() != 9*tok || b.Lent() != 0 {
		t.Fatalf("0.3 s after the loan ended: level %d, lent %d; want 9 tokens, 0", b.Level(), b.Lent())
	}
	b.Borrow(p, 3, slice, 400000, 3000000)
	if !b.Return(p, 3, 3*tok, 3100000) || b.Return(p, 3, 3*tok, 3100000) {
		t.Fatal("a return counts once")
	}
	if b.Level() != 9*tok {
		t.Fatalf("after returning 3 of 4: level %d, want 9 tokens (6 capped, then 3 back)", b.Level())
	}
	b.Borrow(p, 4, slice, 400000, 4000000)
	if b.Return(p, 4, slice, 4400000) {
		t.Fatal("a return at the loan's end gave something back")
	}
}
