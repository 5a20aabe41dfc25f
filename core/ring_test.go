package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// startRing returns a go-redis Ring over n standalone servers of the
// test's own, with a fast heartbeat so a dead shard leaves the ring in
// well under a second.
func startRing(t *testing.T, n int) (*redis.Ring, map[string]*redistest.Server) {
	t.Helper()
	servers := map[string]*redistest.Server{}
	addrs := map[string]string{}
	for i := range n {
		name := "shard" + string(rune('a'+i))
		servers[name] = redistest.StartServer(t)
		addrs[name] = servers[name].Addr()
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs, HeartbeatFrequency: 100 * time.Millisecond})
	t.Cleanup(func() { ring.Close() })
	return ring, servers
}

// holder returns the name of the one server holding every key, failing t
// when the keys are split or missing.
func holder(t *testing.T, servers map[string]*redistest.Server, keys []string) string {
	t.Helper()
	ctx := context.Background()
	found := ""
	for name, s := range servers {
		if !s.Running() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := c.Exists(ctx, keys...).Result()
		c.Close()
		switch {
		case err != nil:
			t.Fatal(err)
		case n == 0:
		case n != int64(len(keys)) || found != "":
			t.Fatalf("keys %q split across shards (%d on %s)", keys, n, name)
		default:
			found = name
		}
	}
	if found == "" {
		t.Fatalf("keys %q on no shard", keys)
	}
	return found
}

// TestRing runs the RedisStore on a go-redis Ring of three standalone
// servers. Ring hashes keys by their {hash tag} like Cluster does, so every
// policy of a subject lives on one shard and a multi-policy decision stays
// one script, while subjects spread over the shards.
func TestRing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three redis-server processes")
	}
	ring, servers := startRing(t, 3)
	ctx := context.Background()
	store := core.NewRedisStore(ring, core.WithPrefix(redistest.Prefix(t)))
	policies := topoPolicies(t, threePolicies...)
	each := make([]core.Outcome, len(policies))
	subjects := topoSubjects(200)
	perShard := map[string]int{}
	for _, subj := range subjects {
		o, err := store.Take(ctx, subj, 1, policies, each)
		if err != nil || !o.Allowed || each[0].Remaining != 9 || each[1].Remaining != 99 || each[2].Remaining != 999 {
			t.Fatalf("Take(%q) = %+v, each %+v, %v; want allowed with 9, 99, 999 left", subj, o, each, err)
		}
		keys := make([]string, len(policies))
		for i, p := range policies {
			keys[i] = store.Key(p.Name, subj)
		}
		perShard[holder(t, servers, keys)]++
	}
	if len(perShard) != len(servers) {
		t.Errorf("subjects landed on %d shards, want all %d: %v", len(perShard), len(servers), perShard)
	}
	t.Logf("%d subjects per shard: %v", len(subjects), perShard)

	lim := topoLimiter(t, core.Config{
		Store: store, Limit: core.Limit{Rate: 1, Period: time.Hour, Burst: 3}, FailMode: core.FailClosed, Timeout: 2 * time.Second,
		Extra: []core.NamedLimit{{Name: "daily", Limit: core.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 10}}},
	})
	for i, want := range []bool{true, true, true, false} {
		res, err := lim.Allow(ctx, "ring-user")
		if err != nil || res.Degraded || res.Allowed != want {
			t.Fatalf("decision %d: %+v, %v; want allowed %v", i+1, res, err, want)
		}
	}
}

// TestRingShardLossResetsBuckets documents Ring's trade-off: it has no
// replicas and no failover. When a shard dies, the ring drops it after a
// few missed heartbeats (decisions for its subjects fail or stall until
// then, and a Limiter's FailMode decides) and its subjects move to the surviving
// shards with full buckets: their limits start over.
func TestRingShardLossResetsBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills redis-server processes")
	}
	ring, servers := startRing(t, 2)
	ctx := context.Background()
	store := core.NewRedisStore(ring, core.WithPrefix(redistest.Prefix(t)))
	// The store itself, not a Limiter: a limiter's local denial cache
	// would answer the exhausted subject without asking the ring.
	policies := topoPolicies(t, core.NamedLimit{Name: "pair", Limit: core.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 2}})
	const subject = "exhausted"
	for i, want := range []bool{true, true, false} {
		if o, err := store.Take(ctx, subject, 1, policies, nil); err != nil || o.Allowed != want {
			t.Fatalf("decision %d: %+v, %v; want allowed %v", i+1, o, err, want)
		}
	}
	name := holder(t, servers, []string{store.Key("pair", subject)})
	servers[name].Kill()
	killed := time.Now()

	var failed int
	var o core.Outcome
	waitFor(t, 20*time.Second, "the ring to drop the dead shard", func() bool {
		var err error
		if o, err = store.Take(ctx, subject, 1, policies, nil); err != nil {
			failed++
		}
		return err == nil
	})
	// go-redis retries a failed command on the shard the ring names then,
	// so the first decision may simply take that long rather than fail.
	t.Logf("shard %s killed: %d failed decisions over %v until the ring moved %q to a live shard",
		name, failed, time.Since(killed).Round(time.Millisecond), subject)
	if !o.Allowed || o.Remaining != 1 {
		t.Errorf("on the surviving shard: %+v; want a full bucket again (allowed, 1 left): a shard loss resets its subjects", o)
	}
}
