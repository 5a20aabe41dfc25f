package soak_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Cardinality attacks: a client that makes every request a new subject —
// rotating through IPv6 /64s (cheap: a household gets 2^16 of them, a
// hosting customer far more) or sending random API keys — tries to make the
// limiter hold unbounded state, or to push a real subject's bucket out.

// attacker turns a request counter into the keys an attacker's requests
// get from keyfuncs: even i a new IPv6 /64 through IP, odd i a random API
// key through Header.
type attacker struct {
	ip, hdr keyfuncs.KeyFunc
	req     *http.Request
}

func newAttacker() *attacker {
	return &attacker{
		ip:  keyfuncs.IP(),
		hdr: keyfuncs.Header("X-API-Key"),
		req: httptest.NewRequest(http.MethodGet, "/", nil),
	}
}

func (a *attacker) key(t testing.TB, i int) string {
	var k string
	var err error
	if i%2 == 0 {
		a.req.RemoteAddr = "[2001:db8:" + strconv.FormatUint(uint64(i>>16)&0xffff, 16) + ":" + strconv.FormatUint(uint64(i)&0xffff, 16) + "::1]:443"
		k, err = a.ip(a.req)
	} else {
		a.req.Header["X-Api-Key"] = []string{strconv.FormatUint(rand.Uint64(), 36)}
		k, err = a.hdr(a.req)
	}
	if err != nil {
		t.Fatalf("key %d: %v", i, err)
	}
	return k
}

// victimCheck makes the victim's next decision and checks it left want
// tokens (or want+slack, when a real clock may have refilled some).
func victimCheck(t *testing.T, lim *core.Limiter, want, slack int, after int) {
	t.Helper()
	res, err := lim.Allow(context.Background(), "victim")
	if err != nil || !res.Allowed || res.Remaining < want || res.Remaining > want+slack {
		t.Fatalf("after %d attacker keys, the victim's decision: %+v, %v; want allowed with %d left", after, res, err, want)
	}
}

// TestCardinalityMemoryStore: a million unique keys against a MemoryStore
// capped at 10k buckets. It never holds more than the cap, the heap stays
// within a few MB of it, and a known subject's bucket, further from full
// than the attacker's, is never the one evicted: its decisions stay exact.
func TestCardinalityMemoryStore(t *testing.T) {
	skipShort(t)
	const maxKeys = 10_000
	n := attackKeys()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := core.NewMemoryStore(core.WithMaxKeys(maxKeys), core.WithClock(func() time.Time { return clock }))
	lim, err := core.New(core.Config{Store: store, Limit: core.PerHour(100), FailMode: core.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := heapInUse()
	ctx := context.Background()
	for range 10 { // the victim has spent a tenth of its bucket
		lim.Allow(ctx, "victim")
	}
	a := newAttacker()
	start := time.Now()
	maxLen, want := 0, 89
	for i := range n {
		if res, err := lim.Allow(ctx, a.key(t, i)); err != nil || !res.Allowed {
			t.Fatalf("attacker key %d: %+v, %v", i, res, err)
		}
		if i%(n/20) == 0 {
			victimCheck(t, lim, want, 0, i)
			want--
			maxLen = max(maxLen, store.Len())
		}
	}
	elapsed := time.Since(start)
	maxLen = max(maxLen, store.Len())
	heapAfter := heapInUse()
	runtime.KeepAlive(lim)
	t.Logf("memory store, WithMaxKeys(%d): %d unique keys in %v (%.0f/s): at most %d buckets held; heap %.1f MB → %.1f MB; victim exact throughout",
		maxKeys, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), maxLen, mb(heapBefore), mb(heapAfter))
	if maxLen > maxKeys {
		t.Errorf("%d buckets held, want ≤ WithMaxKeys(%d)", maxLen, maxKeys)
	}
	if heapAfter > heapBefore+16<<20 {
		t.Errorf("heap grew by %.1f MB for %d buckets", mb(heapAfter-heapBefore), maxKeys)
	}
}

// TestCardinalityFailLocal: the same flood while Redis is down, so every
// decision falls to FailLocal's in-process buckets. Those are bounded by
// Config.LocalMaxKeys (default 65536 buckets, about 10 MB): the heap must
// stay within that, and the victim's local bucket stays exact.
func TestCardinalityFailLocal(t *testing.T) {
	skipShort(t)
	n := attackKeys()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nobody listens there now: connection refused
	c := redis.NewClient(&redis.Options{Addr: down})
	defer c.Close()
	lim, err := core.New(core.Config{
		Store: core.NewRedisStore(c), Limit: core.PerHour(100), FailMode: core.FailLocal, Instances: 2, Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := heapInUse()
	ctx := context.Background()
	for range 10 { // local share: 50 tokens, refilled at 100 per 2 h
		if res, _ := lim.Allow(ctx, "victim"); !res.Degraded {
			t.Fatalf("Redis down but the decision was not degraded: %+v", res)
		}
	}
	a := newAttacker()
	start := time.Now()
	want := 39
	for i := range n {
		if res, err := lim.Allow(ctx, a.key(t, i)); err != nil || !res.Allowed || !res.Degraded {
			t.Fatalf("attacker key %d: %+v, %v; want a degraded allow from the local bucket", i, res, err)
		}
		if i%(n/20) == 0 {
			// A token comes back every 72 s: a slow run may see one.
			victimCheck(t, lim, want, int(time.Since(start)/(72*time.Second))+1, i)
			want--
		}
	}
	elapsed := time.Since(start)
	heapAfter := heapInUse()
	runtime.KeepAlive(lim) // its fallback store holds the buckets
	perBucket := float64(heapAfter-min(heapAfter, heapBefore)) / float64(min(n, core.DefaultMaxKeys))
	t.Logf("FailLocal fallback (Redis down): %d unique keys in %v (%.0f/s); heap %.1f MB → %.1f MB, %.0f bytes a bucket",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), mb(heapBefore), mb(heapAfter), perBucket)
	// DefaultMaxKeys documents about 100 bytes a bucket; allow twice that.
	if limit := heapBefore + 200*core.DefaultMaxKeys; heapAfter > uint64(limit) {
		t.Errorf("heap %.1f MB after %d keys; want ≤ %.1f MB (DefaultMaxKeys buckets at 200 bytes)", mb(heapAfter), n, mb(uint64(limit)))
	}
}

// TestCardinalityRedisTTL: 20k unique keys against real Redis with a
// one-second window. Every bucket key has a TTL no longer than the window
// plus the script's one-second margin, checked right after it is written,
// so the flood leaves nothing behind: the keys are all gone soon after.
func TestCardinalityRedisTTL(t *testing.T) {
	skipShort(t)
	const n = 20_000
	c := redistest.Client(t)
	prefix := redistest.Prefix(t)
	limit := core.PerSecond(5)
	store := core.NewRedisStore(c, core.WithPrefix(prefix))
	lim, err := core.New(core.Config{Store: store, Limit: limit, FailMode: core.FailClosed, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	maxTTL := limit.Window() + time.Second
	ctx := context.Background()
	var next, checked, expired atomic.Int64
	var worstTTL atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := newAttacker()
			for {
				first := int(next.Add(256)) - 256
				if first >= n {
					return
				}
				var batch []string
				for i := first; i < min(first+256, n); i++ {
					k := a.key(t, i)
					if res, err := lim.Allow(ctx, k); err != nil || !res.Allowed || res.Degraded {
						t.Errorf("key %d: %+v, %v; want a store decision allowing it", i, res, err)
						return
					}
					batch = append(batch, store.Key(lim.Name(), k))
				}
				pipe := c.Pipeline()
				cmds := make([]*redis.Cmd, len(batch))
				for i, k := range batch {
					cmds[i] = pipe.Do(ctx, "PTTL", k) // raw milliseconds: -2 gone, -1 no TTL
				}
				_, _ = pipe.Exec(ctx)
				for i, cmd := range cmds {
					ms, err := cmd.Int64()
					switch {
					case err != nil:
						t.Errorf("PTTL %s: %v", batch[i], err)
						return
					case ms == -2:
						expired.Add(1) // already gone: a slow machine
					case ms < 0 || time.Duration(ms)*time.Millisecond > maxTTL:
						t.Errorf("key %s: PTTL %d ms; want 0 ≤ PTTL ≤ %v (window + 1 s)", batch[i], ms, maxTTL)
						return
					default:
						checked.Add(1)
						for w := worstTTL.Load(); ms > w && !worstTTL.CompareAndSwap(w, ms); w = worstTTL.Load() {
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	done := time.Now()
	var left int
	deadline := done.Add(10 * time.Second)
	for {
		left = len(scanKeys(t, c, prefix))
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("real Redis, %v: %d unique keys; %d PTTLs checked (%d already expired), longest %d ms (bound %v); all gone %v after the flood",
		limit, n, checked.Load(), expired.Load(), worstTTL.Load(), maxTTL, time.Since(done).Round(100*time.Millisecond))
	if left != 0 {
		t.Errorf("%d bucket keys still there 10 s after the flood", left)
	}
}

// scanKeys returns every key under prefix (SCAN, not KEYS: the server is shared).
func scanKeys(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}
