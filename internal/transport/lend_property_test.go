package transport

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// lendAdmission is cost admitted, at a time known within [lo, hi] (µs on
// the host's clock, which Redis's TIME reads too): a decision from a
// slice at once, one by the store somewhere during its call.
type lendAdmission struct{ lo, hi, units int64 }

// lendSchedule drives one random schedule from seed through script on
// Redis: simulated instances borrow slices (bucket.OpLend), decide from
// them until spent or until their own loan end (term after they sent the
// borrow), return them early (sometimes twice: the second must give
// nothing), let them end, and take from the bucket one by one. It
// returns what was admitted, and the policy.
func lendSchedule(t *testing.T, c *redis.Client, s *Store, script *redis.Script, seed uint64, ops int) ([]lendAdmission, bucket.Policy, [3]int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	lim := Limit{Rate: 20 + rng.IntN(60), Period: 100 * time.Millisecond}
	lim.Burst = 5 + rng.IntN(lim.Rate)
	p := lim.policy("p")
	ps := []bucket.Policy{p}
	subj := bucket.HashSubject("s" + time.Now().Format("150405.000000"))
	term := time.Duration(5+rng.IntN(40)) * time.Millisecond
	k := bucket.SliceUnits(&p, term.Microseconds()) / p.Unit
	k = max(1, min(k, p.Capacity/p.Unit/2))
	type slice struct {
		id          uint64
		left        int64
		end         time.Time
		returnTwice bool
	}
	instances := 1 + rng.IntN(6)
	held := make([]*slice, instances)
	var adm []lendAdmission
	var call, loan uint64
	var counts [3]int // from slices, by the store, slices lent
	ctx := context.Background()
	do := func(short bool, a bucket.Ask) bucket.Outcome {
		call++
		a.Deadline = time.Now().Add(5 * time.Second)
		keys, args := s.Encode(ctx, call, short, a)
		reply, err := script.Run(ctx, c, keys, args...).Text()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		o, err := ParseReply(reply, a.Each)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return o
	}
	lend := func(ret uint64, back int64, id uint64, want int64) bucket.Outcome {
		return do(false, bucket.Ask{Op: bucket.WithArg(bucket.OpLend, term.Microseconds()), Subj: subj, N: 1, Policies: ps,
			Each: make([]bucket.Outcome, 1), Lend: &bucket.Lend{Return: ret, Back: []int64{back}, ID: id, Want: []int64{want}}})
	}
	giveBack := func(i int) {
		sl := held[i]
		held[i] = nil
		lend(sl.id, sl.left, 0, 0)
		if sl.returnTwice {
			lend(sl.id, sl.left, 0, 0)
		}
	}
	for range ops {
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		i := rng.IntN(instances)
		sl := held[i]
		if sl != nil && !time.Now().Before(sl.end) {
			if rng.IntN(2) == 0 {
				giveBack(i) // after its end: gives nothing
			} else {
				held[i] = nil
			}
			sl = nil
		}
		switch r := rng.IntN(10); {
		case r < 6: // a decision
			n := int64(1 + rng.IntN(min(2, lim.Burst)))
			if sl != nil && sl.left >= n {
				now := time.Now()
				if now.Before(sl.end) {
					sl.left -= n
					us := now.UnixMicro()
					adm = append(adm, lendAdmission{us, us, n * p.Unit})
					counts[0]++
					continue
				}
			}
			lo := time.Now().UnixMicro()
			o := do(true, bucket.Ask{Op: bucket.OpTake, Subj: subj, N: int(n), Policies: ps})
			if o.Allowed {
				adm = append(adm, lendAdmission{lo, time.Now().UnixMicro(), n * p.Unit})
				counts[1]++
			}
		case r < 8: // a borrow, returning the last slice
			var ret uint64
			var back int64
			if sl != nil {
				ret, back = sl.id, sl.left
				held[i] = nil
			}
			loan++
			sent := time.Now()
			if o := lend(ret, back, loan, k); o.Allowed {
				held[i] = &slice{id: loan, left: k, end: sent.Add(term), returnTwice: rng.IntN(3) == 0}
				counts[2]++
			}
		default: // the key cooled down: the slice goes back
			if sl != nil {
				giveBack(i)
			}
		}
	}
	return adm, p, counts
}

// lendOverAdmitted checks every window of adm against the exact bucket's
// envelope: for admissions sorted by their earliest time, those from the
// i-th to the j-th all happened within [lo_i, the latest hi], so they
// may total at most Capacity plus Refill per tick boundary in that span.
// It returns the windows checked and the first over (i < 0: none).
func lendOverAdmitted(adm []lendAdmission, p *bucket.Policy) (windows, i, j int) {
	sort.Slice(adm, func(a, b int) bool { return adm[a].lo < adm[b].lo })
	for i := range adm {
		var sum, hi int64
		for j := i; j < len(adm); j++ {
			sum += adm[j].units
			hi = max(hi, adm[j].hi)
			windows++
			if sum > p.Capacity+p.Refill*(hi/p.Tick-adm[i].lo/p.Tick) {
				return windows, i, j
			}
		}
	}
	return windows, -1, -1
}

// TestLendNeverOverAdmits (issue 42): the real script on a real Redis,
// driven by random schedules of borrows, decisions from slices, returns
// (early, late, twice), loan ends and plain decisions across simulated
// instances: no window admits beyond the exact bucket's envelope
// C + R·Δ. The same schedules against the script with the loans left
// out of what may be taken over-admit, so the check can fail.
func TestLendNeverOverAdmits(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, redistest.Prefix(t))
	schedules, ops := 20, 160
	if testing.Short() {
		schedules = 6
	}
	var windows, local, store, lent int
	for seed := range uint64(schedules) {
		adm, p, counts := lendSchedule(t, c, s, TokenBuckets, seed, ops)
		w, i, j := lendOverAdmitted(adm, &p)
		windows += w
		local, store, lent = local+counts[0], store+counts[1], lent+counts[2]
		if i >= 0 {
			t.Fatalf("seed %d: admissions %d..%d over the envelope: %+v", seed, i, j, adm[i:j+1])
		}
	}
	t.Logf("%d schedules, %d windows checked: %d decisions from %d slices, %d by the store; none over C + R·Δ",
		schedules, windows, local, lent, store)
	if local == 0 || lent == 0 {
		t.Fatal("no slice was used: the schedules show nothing")
	}

	broken := strings.Replace(mgetLua+tokenBucketsLua, "tok, units = tok - lent * q[3], units - lent * q[3]", "", 1)
	if broken == mgetLua+tokenBucketsLua {
		t.Fatal("the line the broken script leaves out is gone: update the test")
	}
	found := 0
	for seed := range uint64(schedules) {
		adm, p, _ := lendSchedule(t, c, s, redis.NewScript(broken), 1000+seed, ops)
		if _, i, _ := lendOverAdmitted(adm, &p); i >= 0 {
			found++
		}
	}
	t.Logf("with the loans left out of the level: %d of %d schedules over the envelope", found, schedules)
	if found == 0 {
		t.Error("the check found no over-admission by a script that forgets its loans")
	}
}
