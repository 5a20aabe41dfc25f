package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// TestAllowAllExact: all or nothing under concurrency. Instances (each its
// own client and store) run goroutines deciding k = 3 checks at once —
// a client's address (one of 4), its tenant (one of 2) and a route-wide
// ceiling, costing 1, 2 and 3 — until every bucket is nearly spent. The
// limits refill less than a token during the test, so at the end each
// bucket must hold its burst less exactly what the admitted requests
// took: nothing more was admitted (at most C + R·Δ, R·Δ < 1), and no
// refused request took anything (not even on a Cluster, whose nodes give
// back what they took when another refuses). On one node a refusal is
// exact: a bucket of every refused request still lacks its cost; on a
// Cluster the give-back window may refuse spuriously, counted. Redis runs
// with the denial caches, the Cluster without (every refusal reaches
// its nodes).
func TestAllowAllExact(t *testing.T) {
	month := 30 * 24 * time.Hour
	per := func(burst int) core.Limit { return core.Limit{Rate: burst, Period: month, Burst: burst} }
	type topo struct {
		instances int
		store     func(t *testing.T, i int, prefix string) core.Store
		oneNode   bool
		denyCache int // -1 on the Cluster: every refusal reaches the nodes, and their give-backs
	}
	var cluster *redistest.Cluster
	topos := map[string]topo{
		"memory": {1, func(t *testing.T, _ int, _ string) core.Store { return core.NewMemoryStore() }, true, 0},
		"redis": {4, func(t *testing.T, _ int, prefix string) core.Store {
			c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return core.NewRedisStore(c, core.WithPrefix(prefix))
		}, true, 0},
		"cluster": {3, func(t *testing.T, _ int, prefix string) core.Store {
			if cluster == nil {
				cluster = redistest.StartCluster(t, 3, 0)
			}
			o := cluster.Options()
			o.ContextTimeoutEnabled = true
			c := redis.NewClusterClient(o)
			t.Cleanup(func() { c.Close() })
			return core.NewRedisStore(c, core.WithPrefix(prefix))
		}, false, -1},
	}
	for name, tp := range topos {
		t.Run(name, func(t *testing.T) {
			if name == "cluster" && testing.Short() {
				t.Skip("Redis Cluster: skipped with -short")
			}
			prefix := redistest.Prefix(t)
			if name == "memory" {
				prefix = ""
			}
			// Room for 80 requests in each: the client's 4 buckets, the
			// tenant's 2 and the ceiling run out about together, so
			// refusals come from every kind of check (on a Cluster, from
			// every node) while the others' nodes take and give back.
			limits := []core.Limit{per(20), per(80), per(240)}
			names := []string{"ip", "tenant", "route"}
			cost := []int{1, 2, 3}
			keys := [][]string{{"ip-a", "ip-b", "ip-c", "ip-d"}, {"acme", "globex"}, {"*"}}
			type inst struct{ ls []*core.Limiter }
			insts := make([]inst, tp.instances)
			for i := range insts {
				s := tp.store(t, i, prefix)
				for j := range limits {
					insts[i].ls = append(insts[i].ls, limitertest.New(t, core.Config{Store: s, Name: names[j], Limit: limits[j],
						FailMode: core.FailClosed, Timeout: 10 * time.Second, DenyCacheSize: tp.denyCache}))
				}
			}
			if cluster != nil && name == "cluster" {
				nodes := map[string]bool{}
				for _, ks := range keys {
					for _, k := range ks {
						c, err := cluster.Client().MasterForKey(context.Background(), k)
						if err != nil {
							t.Fatal(err)
						}
						nodes[c.Options().Addr] = true
					}
				}
				if len(nodes) < 3 {
					t.Fatalf("the keys live on %d nodes; want every node of 3", len(nodes))
				}
			}
			type req struct {
				keys    [3]string
				allowed bool
				within  bool // refused, yet a check within its limit
			}
			const goroutines, each = 16, 40
			reqs := make([][]req, goroutines)
			var wg sync.WaitGroup
			start := time.Now()
			for g := range goroutines {
				wg.Go(func() {
					in := insts[g%len(insts)]
					for range each {
						var r req
						checks := make([]core.Check, 3)
						for j := range checks {
							r.keys[j] = keys[j][rand.IntN(len(keys[j]))]
							checks[j] = core.Check{Limiter: in.ls[j], Key: r.keys[j], N: cost[j]}
						}
						first, rs, err := core.AllowAll(context.Background(), checks...)
						if err != nil || first.Degraded {
							t.Errorf("AllowAll: %+v %v", first, err)
							return
						}
						r.allowed = first.Allowed
						for j := range rs {
							r.within = r.within || !first.Allowed && rs[j].Allowed
							if first.Allowed != rs[j].Allowed && first.Allowed {
								t.Errorf("allowed, yet check %d refused: %+v", j, rs)
							}
						}
						reqs[g] = append(reqs[g], r)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			taken := map[string]int{}
			admitted, refused, within := 0, 0, 0
			for _, rs := range reqs {
				for _, r := range rs {
					if !r.allowed {
						refused++
						if r.within {
							within++
						}
						continue
					}
					admitted++
					for j, k := range r.keys {
						taken[names[j]+"/"+k] += cost[j]
					}
				}
			}
			left := func(j int, k string) int {
				r, err := insts[0].ls[j].Peek(context.Background(), k, 1)
				if err != nil || r.Degraded {
					t.Fatalf("Peek: %+v %v", r, err)
				}
				return r.Remaining
			}
			var report []string
			for j := range names {
				for _, k := range keys[j] {
					b, got := limits[j].Burst, left(j, k)
					took := taken[names[j]+"/"+k]
					if took > b {
						t.Errorf("%s %s: admitted %d tokens, burst %d (C + R·Δ < C+1): over-admitted", names[j], k, took, b)
					}
					if got != b-took {
						t.Errorf("%s %s: %d left; want %d − %d admitted = %d: refused requests took %d", names[j], k, got, b, took, b-took, b-took-got)
					}
					report = append(report, fmt.Sprintf("%s/%s %d/%d", names[j], k, took, b))
				}
			}
			spurious := 0
			for _, rs := range reqs {
				for _, r := range rs {
					if r.allowed {
						continue
					}
					short := false
					for j, k := range r.keys {
						short = short || left(j, k) < cost[j]
					}
					if !short {
						spurious++
					}
				}
			}
			if tp.oneNode && spurious > 0 {
				t.Errorf("%d refused requests found every bucket holding their cost at the end: refused while within every limit", spurious)
			}
			t.Logf("%s: %d instances × %d goroutines, %d requests in %v: %d admitted, %d refused (%d with a check within its limit or not asked, which took nothing or gave it back; %d while every bucket still holds its cost at the end); admitted tokens/burst: %v; refused requests took 0",
				name, tp.instances, goroutines, goroutines*each, elapsed.Round(time.Millisecond), admitted, refused, within, spurious, report)
		})
	}
}
