package core_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// Helpers shared by the topology tests (cluster, sentinel, ring).

// topoLog discards the degraded-decision log lines of outage tests.
var topoLog = slog.New(slog.DiscardHandler)

func topoLimiter(t testing.TB, cfg core.Config) *core.Limiter {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = topoLog
	}
	l, err := core.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func topoPolicies(t testing.TB, limits ...core.NamedLimit) []core.Policy {
	t.Helper()
	ps, err := core.Policies(limits...)
	if err != nil {
		t.Fatalf("Policies: %v", err)
	}
	return ps
}

// threePolicies are three limits of one subject, decided in one script.
var threePolicies = []core.NamedLimit{
	{Name: "sec", Limit: core.PerSecond(10)},
	{Name: "min", Limit: core.PerMinute(100)},
	{Name: "day", Limit: core.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1000}},
}

// topoSubjects are n ordinary subjects plus ones the store must hash: too
// long, holding braces (which would move the hash tag), starting with '~'.
func topoSubjects(n int) []string {
	s := make([]string, 0, n+4)
	for i := range n {
		s = append(s, "user-"+strconv.Itoa(i))
	}
	return append(s, strings.Repeat("x", 100), "{evil}", "a}b{c", "~tilde")
}

// TestRedisCluster runs the RedisStore on a 3-primary Redis Cluster of the
// test's own: every decision is one script in one slot, whatever the
// subject and however many policies; a shard's empty script cache is
// survived; and the limit stays exact with many clients on one key.
func TestRedisCluster(t *testing.T) {
	cluster := startCluster(t)

	t.Run("SubjectsSpreadOneSlotEach", func(t *testing.T) {
		ctx := context.Background()
		client := cluster.Client()
		store := core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t)))
		policies := topoPolicies(t, threePolicies...)
		each := make([]core.Outcome, len(policies))
		subjects := topoSubjects(300)
		perPrimary := map[string]int{}
		for _, subj := range subjects {
			// Any cross-slot key would fail the whole script with CROSSSLOT.
			o, err := store.Take(ctx, subj, 1, policies, each)
			if err != nil {
				t.Fatalf("Take(%q) with %d policies: %v", subj, len(policies), err)
			}
			if !o.Allowed || each[0].Remaining != 9 || each[1].Remaining != 99 || each[2].Remaining != 999 {
				t.Fatalf("Take(%q): %+v, each %+v; want allowed with 9, 99, 999 left", subj, o, each)
			}
			keys := make([]string, len(policies))
			for i, p := range policies {
				keys[i] = store.Key(p.Name, subj)
			}
			slot := keySlot(t, client, keys[0])
			for _, k := range keys[1:] {
				if s := keySlot(t, client, k); s != slot {
					t.Fatalf("subject %q: key %q in slot %d, key %q in slot %d", subj, keys[0], slot, k, s)
				}
			}
			node, err := client.MasterForKey(ctx, keys[0])
			if err != nil {
				t.Fatal(err)
			}
			// Ask the owning primary directly: all the subject's keys are there.
			if n, err := node.Exists(ctx, keys...).Result(); err != nil || n != int64(len(keys)) {
				t.Fatalf("subject %q: %d of %d keys on the primary of slot %d (%v)", subj, n, len(keys), slot, err)
			}
			perPrimary[node.Options().Addr]++
		}
		if len(perPrimary) != 3 {
			t.Errorf("subjects landed on %d primaries, want all 3: %v", len(perPrimary), perPrimary)
		}
		t.Logf("%d subjects per primary: %v", len(subjects), perPrimary)

		// A limiter with extra limits makes the same multi-key call.
		lim := topoLimiter(t, core.Config{
			Store: store, Limit: core.PerSecond(10), FailMode: core.FailClosed, Timeout: 2 * time.Second,
			Extra: []core.NamedLimit{{Name: "hourly", Limit: core.PerHour(100)}},
		})
		for _, subj := range subjects {
			res, err := lim.Allow(ctx, subj)
			if err != nil || res.Degraded || !res.Allowed || len(res.Policies) != 2 {
				t.Fatalf("Allow(%q) = %+v, %v; want allowed by both limits", subj, res, err)
			}
			// Reset deletes both keys in one DEL: one slot too.
			if err := lim.Reset(ctx, subj); err != nil {
				t.Fatalf("Reset(%q): %v", subj, err)
			}
		}
	})

	t.Run("ScriptFlushedOnEveryPrimary", func(t *testing.T) {
		ctx := context.Background()
		client := cluster.Client()
		store := core.NewRedisStore(client, core.WithPrefix(redistest.Prefix(t)))
		// One token a day: no refill during the test, so counts are exact.
		policies := topoPolicies(t, threePolicies[2])
		subjects := topoSubjects(60)
		const rounds = 3
		take := func(round int) {
			t.Helper()
			for _, subj := range subjects {
				o, err := store.Take(ctx, subj, 1, policies, nil)
				if err != nil {
					t.Fatalf("round %d: Take(%q): %v", round, subj, err)
				}
				if want := int64(1000 - round - 1); !o.Allowed || o.Remaining != want {
					t.Fatalf("round %d: Take(%q) = %+v, want allowed with %d left (each decision counted once)", round, subj, o, want)
				}
			}
		}
		flush := func() map[string]int {
			t.Helper()
			noscript := map[string]int{}
			var mu sync.Mutex
			err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				n := errorStat(ctx, node, "NOSCRIPT")
				mu.Lock()
				noscript[node.Options().Addr] = n
				mu.Unlock()
				return node.ScriptFlush(ctx).Err()
			})
			if err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			return noscript
		}
		flush() // primaries that never saw the script
		for r := range rounds {
			take(r)
		}
		before := flush() // and primaries that had it
		for r := rounds; r < 2*rounds; r++ {
			take(r)
		}
		after := flush()
		for addr, n := range after {
			if n < 0 {
				t.Logf("primary %s has no INFO errorstats: NOSCRIPT not counted", addr)
				continue
			}
			if n <= before[addr] {
				t.Errorf("primary %s: NOSCRIPT errors %d → %d; want the flushed cache to have been hit", addr, before[addr], n)
			}
		}
	})

	t.Run("ExactAcrossSixteenClients", func(t *testing.T) {
		const (
			instances  = 16
			goroutines = 4 // per instance
			perG       = 63
			total      = instances * goroutines * perG // 4032
		)
		prefix := redistest.Prefix(t)
		hot := core.Limit{Rate: 200, Period: time.Second, Burst: 50}
		cold := core.Limit{Rate: 1, Period: 24 * time.Hour, Burst: total + 100}
		var hots, colds [instances]*core.Limiter
		for i := range instances {
			store := core.NewRedisStore(cluster.Client(), core.WithPrefix(prefix))
			hots[i] = topoLimiter(t, core.Config{Store: store, Limit: hot, FailMode: core.FailClosed, Timeout: 5 * time.Second})
			colds[i] = topoLimiter(t, core.Config{Store: store, Limit: cold, FailMode: core.FailClosed, Timeout: 5 * time.Second})
		}
		// Δ spans every decision on the Redis clock: it starts before the
		// first request is sent and ends after the last answer arrives.
		flood := limitertest.Flood{Key: "hot", Goroutines: goroutines, Each: perG}
		c := flood.Run(t, hots[:]...)
		if c.Degraded != 0 {
			t.Fatalf("%d degraded decisions; the bound cannot be checked", c.Degraded)
		}
		bound := limitertest.Bound(hot, c.Elapsed)
		t.Logf("hot key: %d decisions from %d clients in %v: admitted %d, denied %d; bound C + R·Δ = %d + %.0f/s × %.3fs = %d",
			total, instances, c.Elapsed.Round(time.Millisecond), c.Admitted, c.Denied, hot.Capacity(), float64(hot.Rate)/hot.Period.Seconds(), c.Elapsed.Seconds(), bound)
		if c.Admitted > bound {
			t.Errorf("admitted %d > C + R·Δ = %d", c.Admitted, bound)
		}
		if c.Admitted < int64(hot.Capacity()) {
			t.Errorf("admitted %d < burst %d: a full bucket denied", c.Admitted, hot.Capacity())
		}

		flood.Key = "cold"
		if c = flood.Run(t, colds[:]...); c.Denied != 0 || c.Degraded != 0 || c.Admitted != total {
			t.Fatalf("never-exhausted key: admitted %d, denied %d, degraded %d; want all %d admitted",
				c.Admitted, c.Denied, c.Degraded, total)
		}
		res, err := colds[0].Allow(context.Background(), "cold")
		if err != nil || res.Remaining != cold.Capacity()-total-1 {
			t.Errorf("after %d+1 decisions: Remaining %d (%v), want %d: each decision counted exactly once",
				total, res.Remaining, err, cold.Capacity()-total-1)
		}
	})
}

func keySlot(t testing.TB, c *redis.ClusterClient, key string) int64 {
	t.Helper()
	slot, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// errorStat returns how many errors with the given prefix (e.g. NOSCRIPT)
// a server has replied since it started, from INFO errorstats; -1 when the
// server cannot tell (Redis before 6.2).
func errorStat(ctx context.Context, c *redis.Client, prefix string) int {
	info, _ := c.Info(ctx, "errorstats").Result()
	if !strings.Contains(info, "# Errorstats") {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+prefix+":count="); ok {
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}
