package transport

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/redistest"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// TestClusterBatchAcrossSlots: on Redis Cluster, a batch of one node's
// subjects, in different slots, is one script call (TokenBucketsAcross);
// a batch holding a subject of another node is refused by the node
// before anything is written, and sendNode reports it for the per-subject
// path.
func TestClusterBatchAcrossSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0).Client()
	ctx := context.Background()
	s := New(c, redistest.Prefix(t))
	c.ReloadState(ctx)
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	s.ready.Store(true)
	home, err := c.MasterForKey(ctx, "{s0}")
	if err != nil {
		t.Fatal(err)
	}
	var same []string
	other := ""
	for i := 0; len(same) < 5 || other == ""; i++ {
		subj := "s" + strconv.Itoa(i)
		n, err := c.MasterForKey(ctx, "{"+subj+"}")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case n.Options().Addr != home.Options().Addr:
			if other == "" {
				other = subj
			}
		case len(same) < 5:
			same = append(same, subj)
		}
	}
	policies := []bucket.Policy{PerMinute(10).policy("p")}
	batchOf := func(subjs ...string) []*request {
		var b []*request
		for _, subj := range subjs {
			b = append(b, &request{ctx: ctx, Ask: bucket.Ask{Subj: subj, Op: bucket.OpTake, N: 1, Policies: policies}})
		}
		return b
	}
	batch := batchOf(append(same, same[0])...)
	if !s.sendNode(ctx, home, s.idSeq.Add(1), batch) {
		t.Fatal("the node did not run a batch of its own subjects")
	}
	for i, r := range batch {
		want := "1,9,"
		if i == len(same) {
			want = "1,8," // same[0] again, in the same call
		}
		if r.err != nil || !strings.HasPrefix(r.reply, want) {
			t.Errorf("request %d (%s): %q, %v; want %s…", i, r.Subj, r.reply, r.err, want)
		}
	}
	mixed := batchOf(same[1], other)
	if s.sendNode(ctx, home, s.idSeq.Add(1), mixed) {
		t.Fatalf("a batch with another node's subject ran: %q %q", mixed[0].reply, mixed[1].reply)
	}
	again := batchOf(same[1])
	if !s.sendNode(ctx, home, s.idSeq.Add(1), again) || !strings.HasPrefix(again[0].reply, "1,8,") {
		t.Fatalf("after the refused batch: %q, %v; want 1,8,… (it took nothing)", again[0].reply, again[0].err)
	}
}

// TestClusterBatchBeforeRedis7: a node that cannot run a flagged script
// (Redis before 7 answers "Error compiling script", as miniredis does)
// makes the store send every batch per subject from then on, having
// written nothing.
func TestClusterBatchBeforeRedis7(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	node := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer node.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	defer cluster.Close()
	s := New(cluster, defaultPrefix)
	ctx := context.Background()
	policies := []bucket.Policy{PerMinute(10).policy("p")}
	batch := []*request{
		{ctx: ctx, Ask: bucket.Ask{Subj: "a", Op: bucket.OpTake, N: 1, Policies: policies}},
		{ctx: ctx, Ask: bucket.Ask{Subj: "b", Op: bucket.OpTake, N: 1, Policies: policies}},
	}
	if s.sendNode(ctx, node, s.idSeq.Add(1), batch) {
		t.Fatalf("a node without script flags ran the batch: %q, %v", batch[0].reply, batch[0].err)
	}
	if !s.noAcross.Load() {
		t.Fatal("the store did not note that its nodes take no flagged script")
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys written: %v", keys)
	}
	if batch[0].reply != "" || batch[0].err != nil {
		t.Fatalf("the refused batch was answered: %q, %v", batch[0].reply, batch[0].err)
	}
}

// TestNodeOfSubject: the node a subject's decisions go to, and whose
// breaker and timing they count on, is the node of its keys, braces in
// the subject or not.
func TestNodeOfSubject(t *testing.T) {
	ctx := context.Background()
	subjects := []string{"a", "s1", "10.0.0.1", "x{y}z", "}a", "{", "a}b{c", "{a}", "}{"}
	for i := range 200 {
		subjects = append(subjects, "k"+strconv.Itoa(i))
	}
	for i, subj := range subjects {
		subjects[i] = bucket.HashSubject(subj)
	}
	c := redistest.StartCluster(t, 3, 0).Client()
	s := New(c, defaultPrefix)
	c.ReloadState(ctx)
	s.ready.Store(true)
	for _, subj := range subjects {
		want, err := c.MasterForKey(ctx, s.Key(subj, "policy"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.nodeClient(subj); got == nil || got.Options().Addr != want.Options().Addr {
			t.Errorf("Cluster, subject %q: node %v, its keys' %s", subj, got, want.Options().Addr)
		}
	}
	addr := redistest.Addr(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr, "b": addr, "c": addr}})
	defer ring.Close()
	rs := New(ring, defaultPrefix)
	rs.ready.Store(true)
	for _, subj := range subjects {
		want, err := ring.GetShardClientForKey(rs.Key(subj, "policy"))
		if err != nil {
			t.Fatal(err)
		}
		if got := rs.nodeClient(subj); got != want {
			t.Errorf("Ring, subject %q: another shard than its keys'", subj)
		}
	}
}

// TestLoneAcrossOneBucket: a lone take across one bucket (AllowAll of one
// check; an Envoy request of one descriptor) goes as the lone take of its
// cost, three arguments, and decides and writes as the form across
// subjects ("A") does: costs within and above the burst, and a bucket
// written under another limit (the batch path's).
func TestLoneAcrossOneBucket(t *testing.T) {
	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			short, long := New(c, prefix+"s:"), New(c, prefix+"l:")
			five := mustPolicies(t, NamedLimit{Name: "p", Limit: slow})
			other := mustPolicies(t, NamedLimit{Name: "p", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 9}})
			for i, step := range []struct {
				ps []bucket.Policy
				n  int
			}{{five, 2}, {five, 1}, {five, 6}, {five, 3}, {other, 1}, {five, 1}, {five, 5}} {
				ask := bucket.Ask{Op: bucket.OpTake, Subj: bucket.HashSubject("k"), Policies: step.ps, Each: make([]bucket.Outcome, 1), Across: []bucket.Part{{Subj: bucket.HashSubject("k"), N: step.n}}}
				r := &request{ctx: ctx, Ask: ask}
				keys, args := short.encodeShort(ctx, short.idSeq.Add(1), []*request{r})
				if len(args) != 3 {
					t.Fatalf("step %d: %d arguments %v; want the lone take's 3", i, len(args), args)
				}
				got, err := TokenBuckets.Run(ctx, c, keys, args...).Text()
				if err != nil {
					t.Fatal(err)
				}
				p := &step.ps[0]
				lkeys := []string{long.Key(ask.Subj, p.Name), long.recordKey(ask.Subj, long.idSeq.Add(1))}
				want, err := TokenBuckets.Run(ctx, c, lkeys, recordTTL(ctx), "A", p.Arg(), step.n).Text()
				if err != nil {
					t.Fatal(err)
				}
				var g, w [1]bucket.Outcome
				go1, err1 := ParseReply(got, g[:])
				wo, err2 := ParseReply(want, w[:])
				if err1 != nil || err2 != nil || go1.Allowed != wo.Allowed || g[0].Remaining != w[0].Remaining || (g[0].RetryAfter > 0) != (w[0].RetryAfter > 0) {
					t.Fatalf("step %d (n %d): lone take %q, across %q", i, step.n, got, want)
				}
				// Whole tokens held (the refill between the calls adds less
				// than one), and the policy written.
				gv, _ := c.Get(ctx, keys[0]).Result()
				wv, _ := c.Get(ctx, lkeys[0]).Result()
				tokens := func(v string) string {
					f := strings.SplitN(v, ":", 3)
					if len(f) < 3 {
						return v
					}
					u, _ := strconv.ParseInt(f[0], 10, 64)
					return strconv.FormatInt(u/p.Unit, 10) + ":" + f[2]
				}
				if tokens(gv) != tokens(wv) {
					t.Fatalf("step %d: the bucket holds %q; across, %q", i, gv, wv)
				}
			}
		})
	}
}
