package core_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/limitertest"
)

// fuzzMiniredis starts one miniredis for a whole fuzz target: each input
// writes under a prefix of its own.
func fuzzMiniredis(f *testing.F) *redis.Client {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	f.Cleanup(func() { c.Close() })
	return c
}

// FuzzConfig: whatever the Limit, Name, Timeout, Instances and cost, New
// either returns an error or a limiter whose decisions never panic and
// report 0 ≤ Remaining ≤ Burst, a RetryAfter only when denied, and never a
// negative duration — on the memory store, in the FailLocal fallback and on
// miniredis. New must reject every limit whose scaled integers could pass
// 2^53, where Lua's doubles stop being exact.
func FuzzConfig(f *testing.F) {
	for _, s := range []struct {
		rate     int
		periodNs int64
		burst    int
		name     string
		timeout  int64
		inst     int
		cost     int
	}{
		{3, int64(time.Minute), 0, "", 0, 1, 1},
		{10, int64(time.Second), 25, "api", int64(50 * time.Millisecond), 4, 3},
		{1, int64(time.Microsecond), 1 << 52, "edge", 0, 1, 1 << 52},
		{1 << 52, int64(time.Microsecond), 0, "", 0, 2, 7},
		{1, int64(100 * 365 * 24 * time.Hour), 2, "", 0, 2, 2},
		{1, 1<<63 - 1, 1, "max-period", 0, 1, 1},
		{0, int64(time.Second), 0, "", 0, 1, 1},
		{-5, -1, -1, "a b", -1, -1, -1},
		{1 << 62, int64(time.Second), 1 << 62, "{x}", 0, 1 << 40, 1 << 62},
		{7, int64(1500 * time.Nanosecond), 0, "\x00", 0, 1, 1},
	} {
		f.Add(s.rate, s.periodNs, s.burst, s.name, s.timeout, s.inst, s.cost)
	}
	rc := fuzzMiniredis(f)
	f.Fuzz(func(t *testing.T, rate int, periodNs int64, burst int, name string, timeoutNs int64, inst, cost int) {
		limit := core.Limit{Rate: rate, Period: time.Duration(periodNs), Burst: burst}
		clock := limitertest.NewClock()
		for _, st := range []struct {
			what  string
			store core.Store
			mode  core.FailMode
		}{
			{"memory", core.NewMemoryStore(core.WithClock(clock.Now)), core.FailClosed},
			{"FailLocal fallback", limitertest.NewDownStore(), core.FailLocal},
			{"miniredis", core.NewRedisStore(rc, core.WithPrefix(strings.ReplaceAll(t.Name(), "{", "(")+":")), core.FailClosed},
		} {
			l, err := core.New(core.Config{
				Store: st.store, Limit: limit, Name: name, FailMode: st.mode,
				Timeout: time.Duration(timeoutNs), Instances: inst, Logger: limitertest.Quiet,
			})
			if err != nil {
				if l != nil {
					t.Fatalf("%s: New returned a limiter and an error %v", st.what, err)
				}
				continue
			}
			if !exactLimit(limit) {
				t.Fatalf("%s: New accepted %+v, whose scaled integers pass 2^53", st.what, limit)
			}
			if limit.Window() < 0 {
				t.Fatalf("%s: Window() = %v", st.what, limit.Window())
			}
			ctx := context.Background()
			for i := range 4 {
				n := cost
				res, err := l.AllowN(ctx, "subject", n)
				if n < 1 || n > limit.Capacity() {
					if err == nil {
						t.Fatalf("%s: AllowN(%d) with burst %d: no error", st.what, n, limit.Capacity())
					}
					n = 1
					res, err = l.AllowN(ctx, "subject", n)
				}
				if err != nil {
					t.Fatalf("%s: AllowN(%d): %v", st.what, n, err)
				}
				checkResult(t, st.what, res)
				if st.mode != core.FailLocal && res.Degraded && st.what == "memory" {
					t.Fatalf("memory store degraded: %+v", res)
				}
				clock.Advance(time.Duration(i) * 337 * time.Millisecond)
			}
		}
	})
}

// exactLimit reports whether l's scaled integers stay within 2^53, as the
// script needs: Burst × (Period µs / gcd) + Rate / gcd. Computed in big
// integers so the check cannot overflow itself.
func exactLimit(l core.Limit) bool {
	us := big.NewInt(l.Period.Microseconds())
	rate := big.NewInt(int64(l.Rate))
	g := new(big.Int).GCD(nil, nil, rate, us)
	unit := new(big.Int).Quo(us, g)
	refill := new(big.Int).Quo(rate, g)
	total := new(big.Int).Mul(big.NewInt(int64(l.Capacity())), unit)
	total.Add(total, refill)
	return total.Cmp(new(big.Int).Lsh(big.NewInt(1), 53)) <= 0
}

// checkResult holds the invariants of every decision.
func checkResult(t *testing.T, what string, res core.Result) {
	t.Helper()
	c := res.Limit.Capacity()
	switch {
	case res.Remaining < 0 || res.Remaining > c:
		t.Fatalf("%s: Remaining %d outside [0, %d]: %+v", what, res.Remaining, c, res)
	case res.RetryAfter < 0 || res.ResetAfter < 0:
		t.Fatalf("%s: negative duration: %+v", what, res)
	case res.Allowed && res.RetryAfter != 0:
		t.Fatalf("%s: allowed with a RetryAfter: %+v", what, res)
	case !res.Allowed && !res.Degraded && res.RetryAfter == 0:
		t.Fatalf("%s: denied without a RetryAfter: %+v", what, res)
	}
}

// FuzzKey: whatever a subject holds — braces, newlines, NUL, invalid
// UTF-8, 64 KiB — its Redis key is <prefix>{<tag>}:<policy> with a
// non-empty tag free of braces, at most 64 bytes (a raw subject) or '~'
// and a digest, so the subject never moves the Cluster hash tag and never
// makes keys of unbounded size; two different subjects never share a key;
// and deciding on it never panics or fails, in Redis (miniredis) or in
// memory.
func FuzzKey(f *testing.F) {
	for _, s := range [][2]string{
		{"ip:203.0.113.7", "ip:203.0.113.8"},
		{"a}:b{c", "a"},
		{"{", "}"},
		{"~", "~~"},
		{"~" + hex.EncodeToString(make([]byte, 16)), ""},
		{"line\nbreak\r\n", "nul\x00byte"},
		{"\xff\xfe\xfd", "\xc3\x28"},
		{strings.Repeat("k", 64), strings.Repeat("k", 65)},
		{strings.Repeat("{}", 32<<10), strings.Repeat("x", 64<<10)},
		{"}{", "{}"},
	} {
		f.Add(s[0], s[1])
	}
	rc := fuzzMiniredis(f)
	const prefix = "fz:"
	rs := core.NewRedisStore(rc, core.WithPrefix(prefix))
	ms := core.NewMemoryStore()
	pol, err := core.Policies(core.NamedLimit{Name: "pol", Limit: core.PerMinute(5)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := rs.Key("pol", a), rs.Key("pol", b)
		checkRedisKey(t, prefix, "pol", a, ka)
		checkRedisKey(t, prefix, "pol", b, kb)
		if a != b && ka == kb {
			t.Fatalf("subjects %q and %q share the key %q", a, b, ka)
		}
		if a == "" {
			return // Allow refuses an empty key (ErrEmptyKey) before any store
		}
		ctx := context.Background()
		if _, err := rs.Take(ctx, a, 1, pol, nil); err != nil {
			t.Fatalf("Take(%q) on miniredis: %v", a, err)
		}
		if n, err := rc.Exists(ctx, ka).Result(); err != nil || n != 1 {
			t.Fatalf("Take(%q) did not write its key %q: %d, %v", a, ka, n, err)
		}
		rc.Del(ctx, ka)
		if _, err := ms.Take(ctx, a, 1, pol, nil); err != nil {
			t.Fatalf("memory Take(%q): %v", a, err)
		}
	})
}

// checkRedisKey checks the layout of subject's key.
func checkRedisKey(t *testing.T, prefix, policy, subject, key string) {
	t.Helper()
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		t.Fatalf("key %q of %q: want the prefix %q{", key, subject, prefix)
	}
	tag, pol, ok := strings.Cut(rest, "}")
	if !ok || pol != ":"+policy {
		t.Fatalf("key %q of %q: want {tag}:%s after the prefix", key, subject, policy)
	}
	if strings.ContainsAny(tag, "{}") {
		t.Fatalf("key %q of %q: brace inside the hash tag", key, subject)
	}
	if subject != "" && tag == "" {
		t.Fatalf("key %q of %q: empty hash tag (Cluster would hash the whole key)", key, subject)
	}
	raw := len(subject) <= 64 && !strings.ContainsAny(subject, "{}") && !strings.HasPrefix(subject, "~")
	if raw {
		if tag != subject {
			t.Fatalf("key %q of %q: a short plain subject should be used as it is", key, subject)
		}
		return
	}
	sum := sha256.Sum256([]byte(subject))
	if want := "~" + hex.EncodeToString(sum[:16]); tag != want {
		t.Fatalf("key %q of %q: want the digest tag %q", key, subject, want)
	}
}
