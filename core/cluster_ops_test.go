package core_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// Redis Cluster in operation (issue 18): a primary killed under traffic and
// a slot migrated under multi-limit traffic, each on a cluster of the
// test's own, with app instances that each have their own ClusterClient
// (go-redis defaults). Figures go to "fault matrix:" lines, which
// RELIABILITY.md quotes.

// opsTimeout is Config.Timeout in these tests: generous, so that a loaded
// 2-CPU machine under -race does not turn a slow decision into an outage
// (three in a row open a node's breaker). A dead primary refuses
// connections and a moving slot answers TRYAGAIN well within it.
const opsTimeout = time.Second

// opsDecision is one Allow as a cluster ops test saw it.
type opsDecision struct {
	inst       int // which app instance (limiter)
	subj       int // index into the test's subjects
	start, end time.Time
	degraded   bool
}

// opsTraffic is decisions from many goroutines and app instances, kept for
// the checks once the fault is over.
type opsTraffic struct {
	subjects []string

	timeouts, open, other atomic.Int64 // degraded decisions by cause (OnError)

	mu  sync.Mutex
	log []opsDecision
}

func (tr *opsTraffic) onError(err error) {
	switch {
	case errors.Is(err, core.ErrTimeout):
		tr.timeouts.Add(1)
	case errors.Is(err, core.ErrCircuitOpen):
		tr.open.Add(1)
	default:
		tr.other.Add(1)
	}
}

// drive decides, through l, the subjects next picks, pausing pace between
// decisions, until stop closes.
func (tr *opsTraffic) drive(t *testing.T, stop <-chan struct{}, inst int, l *core.Limiter, pace time.Duration, next func(i int) int) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		s := next(i)
		start := time.Now()
		res, err := l.Allow(context.Background(), tr.subjects[s])
		if err != nil {
			t.Errorf("Allow(%q): %v (store trouble must never be an error)", tr.subjects[s], err)
			return
		}
		tr.mu.Lock()
		tr.log = append(tr.log, opsDecision{inst, s, start, time.Now(), res.Degraded})
		tr.mu.Unlock()
		time.Sleep(pace)
	}
}

// since returns the decisions that ended at or after t0 (a copy).
func (tr *opsTraffic) since(t0 time.Time) []opsDecision {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []opsDecision
	for _, d := range tr.log {
		if !d.end.Before(t0) {
			out = append(out, d)
		}
	}
	return out
}

// opsCount is what a set of decisions did.
type opsCount struct {
	decisions, degraded int
	first, last         time.Time // the first degraded decision's start, the last one's end
	slowest             time.Duration
}

func (c *opsCount) add(d opsDecision) {
	c.decisions++
	c.slowest = max(c.slowest, d.end.Sub(d.start))
	if !d.degraded {
		return
	}
	c.degraded++
	if c.first.IsZero() || d.start.Before(c.first) {
		c.first = d.start
	}
	if d.end.After(c.last) {
		c.last = d.end
	}
}

func (c *opsCount) share() float64 {
	if c.decisions == 0 {
		return 0
	}
	return 100 * float64(c.degraded) / float64(c.decisions)
}

// replicaOf returns the cluster node replicating primary.
func replicaOf(t *testing.T, c *redistest.Cluster, primary *redistest.Server) *redistest.Server {
	t.Helper()
	ctx := context.Background()
	for _, s := range c.Nodes()[len(c.Primaries()):] {
		role, err := s.Client().Do(ctx, "ROLE").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(role) >= 3 && role[0] == "slave" && fmt.Sprint(role[2]) == strconv.Itoa(primary.Port()) {
			return s
		}
	}
	t.Fatalf("no replica of %s", primary.Addr())
	return nil
}

// slotOwner returns the address of the primary that node's own slot map
// gives slot to, or "" when none.
func slotOwner(ctx context.Context, node *redis.Client, slot int) string {
	slots, err := node.ClusterSlots(ctx).Result()
	if err != nil {
		return ""
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// TestClusterPrimaryKilled kills one of three Cluster primaries while two
// app instances (FailOpen and FailClosed) decide subjects
// spread over all three. Subjects on the two healthy primaries are never
// degraded (one circuit breaker per node); the dead primary's subjects are
// degraded until its replica is promoted and decided by Redis again within
// about a second of the cluster serving their slots (the store reloads the
// slot map after a failed call instead of waiting for go-redis's 60 s
// refresh). Before issue 18: every subject degraded, for 57 s.
func TestClusterPrimaryKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a Redis Cluster primary: takes seconds")
	}
	// Failure detection within about a second, then the replica's election.
	cluster := redistest.StartCluster(t, 3, 1, "--cluster-node-timeout", "1000")
	ctx := context.Background()
	victim := cluster.Primaries()[0]
	replica := replicaOf(t, cluster, victim)
	admin := cluster.Client()

	tr := &opsTraffic{}
	var dead []bool // by subject: owned by the victim
	victimSlot := -1
	for i := range 60 {
		s := "user-" + strconv.Itoa(i)
		node, err := admin.MasterForKey(ctx, "{"+s+"}")
		if err != nil {
			t.Fatal(err)
		}
		tr.subjects = append(tr.subjects, s)
		onVictim := node.Options().Addr == victim.Addr()
		dead = append(dead, onVictim)
		if onVictim && victimSlot < 0 {
			victimSlot = int(keySlot(t, admin, "{"+s+"}"))
		}
	}
	if victimSlot < 0 {
		t.Fatal("no subject on the primary to kill")
	}

	prefix := redistest.Prefix(t)
	modes := []core.FailMode{core.FailOpen, core.FailClosed}
	var lims []*core.Limiter
	for _, mode := range modes {
		lims = append(lims, topoLimiter(t, core.Config{
			Store: core.NewRedisStore(cluster.Client(), core.WithPrefix(prefix)),
			// Never denies while Redis decides: only degraded decisions differ.
			Limit: core.PerSecond(1_000_000), Name: "killed-" + mode.String(), FailMode: mode,
			Timeout: opsTimeout, OnError: tr.onError,
		}))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const goroutines = 4 // per instance
	for inst, l := range lims {
		for g := range goroutines {
			wg.Go(func() {
				tr.drive(t, stop, inst, l, 2*time.Millisecond, func(i int) int { return (g*17 + i) % len(tr.subjects) })
			})
		}
	}
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopTraffic()

	begin := time.Now()
	waitFor(t, 20*time.Second, "traffic before the kill", func() bool { return len(tr.since(begin)) >= 1000 })

	killed := time.Now()
	victim.Kill()
	// Promoted: the replica answers as a primary. Healed: every live node's
	// slot map gives the dead primary's slots to it, so a client reloading
	// its map from any node finds the slot served.
	var promoted, healed time.Time
	var live []*redis.Client
	for _, s := range cluster.Nodes() {
		if s != victim {
			live = append(live, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1}))
		}
	}
	defer func() {
		for _, c := range live {
			c.Close()
		}
	}()
	waitFor(t, 30*time.Second, "the replica promoted and known to every live node", func() bool {
		if promoted.IsZero() {
			role, err := replica.Client().Do(ctx, "ROLE").Slice()
			if err != nil || len(role) == 0 || role[0] != "master" {
				return false
			}
			promoted = time.Now()
		}
		for _, c := range live {
			if slotOwner(ctx, c, victimSlot) != replica.Addr() {
				return false
			}
		}
		healed = time.Now()
		return true
	})
	// Then until every instance has decided the dead primary's subjects
	// for a second without a degraded decision.
	waitFor(t, 30*time.Second, "the dead primary's subjects decided by Redis again", func() bool {
		recent := tr.since(healed)
		last := make([]time.Time, len(lims))
		seen := make([]bool, len(lims))
		for _, d := range recent {
			if !dead[d.subj] {
				continue
			}
			if d.degraded {
				last[d.inst] = d.end
			} else {
				seen[d.inst] = true
			}
		}
		for i := range lims {
			if !seen[i] || time.Since(healed) < time.Second || time.Since(last[i]) < time.Second {
				return false
			}
		}
		return true
	})
	stopTraffic()

	var before, healthy, deadAfter [2]opsCount
	for _, d := range tr.since(begin) {
		switch {
		case d.end.Before(killed):
			before[d.inst].add(d)
		case dead[d.subj]:
			deadAfter[d.inst].add(d)
		default:
			healthy[d.inst].add(d)
		}
	}
	for i, mode := range modes {
		h, dd := healthy[i], deadAfter[i]
		after := "-"
		if !dd.last.IsZero() {
			after = max(0, dd.last.Sub(healed)).Round(time.Millisecond).String()
		}
		t.Logf("fault matrix: %-22s %-6v healthy-primary subjects: %d of %d degraded (%.2f%%), slowest %v; "+
			"dead-primary subjects: %d of %d degraded, until %v after the kill, %v after the cluster healed "+
			"(promoted %v, healed %v after the kill)",
			"cluster primary killed", mode, h.degraded, h.decisions, h.share(), h.slowest.Round(time.Millisecond),
			dd.degraded, dd.decisions, dd.last.Sub(killed).Round(time.Millisecond), after,
			promoted.Sub(killed).Round(time.Millisecond), healed.Sub(killed).Round(time.Millisecond))
		if before[i].degraded != 0 {
			t.Errorf("%v: %d of %d decisions degraded before the kill", mode, before[i].degraded, before[i].decisions)
		}
		if h.degraded != 0 {
			t.Errorf("%v: %d of %d decisions for subjects on healthy primaries degraded; want none (a breaker per node)", mode, h.degraded, h.decisions)
		}
		if dd.degraded == 0 {
			t.Errorf("%v: no degraded decision for the dead primary's subjects: did the kill happen?", mode)
		}
		// About a second: a breaker cool-down (500 ms) for the next failed
		// call, which reloads the slot map (go-redis waits 200 ms between
		// reloads), plus slack for a loaded 2-CPU machine under -race.
		if w := dd.last.Sub(healed); w > 1500*time.Millisecond {
			t.Errorf("%v: the dead primary's subjects still degraded %v after the cluster served their slots again; want about a second", mode, w)
		}
	}
	t.Logf("degraded by cause: %d timed out, %d circuit open, %d store errors", tr.timeouts.Load(), tr.open.Load(), tr.other.Load())
}
