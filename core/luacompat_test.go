package core

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// TestScriptsRunUnderLua51And54 (issue 36, item 16): every script runs
// unchanged under Lua 5.1 (Redis, Valkey, KeyDB) and Lua 5.4 (Dragonfly;
// Garnet's engine too), answering the same: each is run by the
// interpreters on PATH (lua5.4 required, lua5.1 when present) against a
// stub of Redis (testdata/redisstub.lua: the commands the scripts use on
// an in-memory keyspace, a clock set by hand), through takes, a batch,
// the cross-slot batch, a re-sent call, leases and their renewal. Before,
// transport.TokenBuckets called the Lua 5.1 global unpack, which 5.4 lacks: every
// decision failed there ("attempt to call a nil value"). The test skips
// without lua5.4 unless RATELIMIT_REQUIRE_LUA=1.
func TestScriptsRunUnderLua51And54(t *testing.T) {
	lua54, err := exec.LookPath("lua5.4")
	if err != nil {
		if os.Getenv("RATELIMIT_REQUIRE_LUA") == "1" {
			t.Fatal("RATELIMIT_REQUIRE_LUA=1 but no lua5.4 on PATH")
		}
		t.Skip("no lua5.4 on PATH (apt-get install lua5.4; RATELIMIT_REQUIRE_LUA=1 fails instead)")
	}
	prog := scriptProgram(t)
	outputs := map[string]string{}
	for _, name := range []string{"lua5.4", "lua5.1"} {
		path := lua54
		if name != "lua5.4" {
			if path, err = exec.LookPath(name); err != nil {
				t.Logf("no %s on PATH: 5.4's answers checked alone", name)
				continue
			}
		}
		out, err := exec.Command(path, prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		outputs[name] = string(out)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(line, "error") || strings.Contains(line, ".0") {
				t.Errorf("%s: %s", name, line)
			}
		}
	}
	t.Logf("lua5.4:\n%s", outputs["lua5.4"])
	if want, ok := outputs["lua5.1"]; ok && outputs["lua5.4"] != want {
		t.Errorf("lua5.4 answers\n%s\nlua5.1 answers\n%s", outputs["lua5.4"], want)
	}
	// The lone takes' answers are ones the store reads.
	for _, line := range strings.Split(outputs["lua5.4"], "\n") {
		if name, reply, ok := strings.Cut(line, ": \""); ok && strings.HasPrefix(name, "take ") && name[5] <= '9' {
			if _, err := transport.ParseReply(strings.TrimSuffix(reply, "\""), nil); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// scriptProgram writes a Lua program that runs the scripts against the
// stub and prints each reply, named; it returns its path.
func scriptProgram(t *testing.T) string {
	t.Helper()
	stub, err := filepath.Abs("testdata/redisstub.lua")
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	s := NewRedisStore(c, WithPrefix("p:"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	five, hour := PerSecond(5).policy("five"), PerHour(100).policy("hour")
	req := func(op int, subj string, n int, ps ...Policy) bucket.Ask {
		return bucket.Ask{Op: op, Subj: subj, N: n, Policies: ps}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "dofile(%q)\nstub.time(1767225600, 250000)\n", stub)
	src := func(sc *redis.Script) string {
		return reflect.ValueOf(sc).Elem().FieldByName("src").String()
	}
	var call uint64
	step := func(name string, sc *redis.Script, keys []string, args []any) {
		var a []string
		for _, v := range args {
			a = append(a, fmt.Sprint(v))
		}
		fmt.Fprintf(&b, "print(%q .. ': ' .. run([=====[%s]=====], {%s}, {%s}))\n", name, src(sc), luaList(keys), luaList(a))
	}
	// Lone takes: five of a burst of 5 allowed, the sixth denied; a
	// token later, allowed again; a re-sent call answered as its first.
	for i := range 7 {
		if i == 6 {
			fmt.Fprintf(&b, "stub.advance(200000)\n")
		}
		call++
		keys, args := s.t.Encode(ctx, call, true, req(bucket.OpTake, "alice", 1, five))
		step(fmt.Sprintf("take %d", i+1), transport.TokenBuckets, keys, args)
	}
	keys, args := s.t.Encode(ctx, call, true, req(bucket.OpTake, "alice", 1, five))
	step("take 7 re-sent", transport.TokenBuckets, keys, args)
	// A batch: takes, a peek and a refund, under one and two limits.
	batch := []bucket.Ask{
		req(bucket.OpTake, "bob", 2, five, hour), req(bucket.OpTake, "bob", 2, five, hour),
		req(bucket.OpPeek, "bob", 1, five, hour), req(bucket.OpRefund, "bob", 1, five, hour),
		req(bucket.OpTake, "bob", 3, five, hour),
	}
	call++
	keys, args = s.t.Encode(ctx, call, false, batch...)
	step("take batch", transport.TokenBuckets, keys, args)
	// The same shape across slots (transport.TokenBucketsAcross, as sendNode
	// sends it): the buckets in ARGV, the replay record alone in KEYS.
	call++
	batch = []bucket.Ask{req(bucket.OpTake, "carol", 1, five), req(bucket.OpTake, "dave", 1, five, hour)}
	keys, args = s.t.Encode(ctx, call, false, batch...)
	n := len(keys) - 1
	for _, k := range keys[:n] {
		args = append(args, k)
	}
	step("take across", transport.TokenBucketsAcross, keys[n:], append(args, n))
	// Across subjects (AllowAll): a lone take of three buckets, one a look
	// (cost 0), then one refused; one with a bucket written under another
	// limit (the batch form, operation 8); a batch with a give-back.
	across := func(op int, subj []string, ns []int, ps ...Policy) bucket.Ask {
		a := bucket.Ask{Op: op, Subj: subj[0], Policies: ps, Each: make([]bucket.Outcome, len(ps))}
		for i := range subj {
			a.Across = append(a.Across, bucket.Part{Subj: subj[i], N: ns[i]})
		}
		return a
	}
	gih := []string{"gina", "ivan", "hank"}
	for i, ns := range [][]int{{2, 0, 3}, {4, 1, 1}} {
		call++
		keys, args = s.t.Encode(ctx, call, true, across(bucket.OpTake, gih, ns, five, hour, five))
		step(fmt.Sprintf("across %d", i+1), transport.TokenBuckets, keys, args)
	}
	call++
	keys, args = s.t.Encode(ctx, call, true, across(bucket.OpTake, []string{"gina", "alice"}, []int{1, 1}, five, PerSecond(10).policy("five")))
	step("across, another limit", transport.TokenBuckets, keys, args)
	call++
	keys, args = s.t.Encode(ctx, call, false, across(bucket.OpTake, gih, []int{1, 1, 6}, five, hour, five), across(bucket.OpRefund, gih, []int{1, 1, 1}, five, hour, five))
	step("across batch", transport.TokenBuckets, keys, args)
	// Lending (Config.Borrow): a slice of both limits lent, a take and a
	// batch beside the loan, the loan returned with 1 unspent, re-sent.
	lend := func(ret, id uint64, back, want int64) bucket.Ask {
		a := req(bucket.WithArg(bucket.OpLend, 100_000), "kim", 1, five, hour)
		a.Lend = &bucket.Lend{Return: ret, Back: []int64{back, back}, ID: id, Want: []int64{want, want}}
		return a
	}
	call++
	keys, args = s.t.Encode(ctx, call, false, lend(0, 11, 0, 2))
	step("lend", transport.TokenBuckets, keys, args)
	call++
	keys, args = s.t.Encode(ctx, call, true, req(bucket.OpTake, "kim", 1, five))
	step("take beside a loan", transport.TokenBuckets, keys, args)
	call++
	keys, args = s.t.Encode(ctx, call, false, req(bucket.OpTake, "kim", 1, five, hour), lend(11, 12, 1, 1))
	step("lend batch", transport.TokenBuckets, keys, args)
	call++
	keys, args = s.t.Encode(ctx, call, false, lend(12, 0, 1, 0))
	step("return", transport.TokenBuckets, keys, args)
	step("return re-sent", transport.TokenBuckets, keys, args)
	fmt.Fprintf(&b, "stub.advance(200000)\n")
	call++
	keys, args = s.t.Encode(ctx, call, false, req(bucket.OpPeek, "kim", 1, five, hour))
	step("after the loans", transport.TokenBuckets, keys, args)
	// Leases: two of Max 2 held, a third refused, in one call; renewed; one with a
	// token of the rate limit.
	lease := []string{"p:{erin}:slots"}
	step("leases", transport.AcquireLease, lease, []any{2, 30_000_000, "id0", "id1", "id2"})
	fmt.Fprintf(&b, "stub.advance(1000000)\n")
	step("renew", transport.RenewLeases, []string{lease[0], lease[0], lease[0]}, []any{30_000_000, "id0", "id1", "id2"})
	call++
	keys, args = s.t.Encode(ctx, call, false, req(bucket.OpTake, "frank", 1, five))
	step("lease with rate", transport.AcquireWithRate, append([]string{"p:{frank}:slots"}, keys...), append([]any{2, 30_000_000, 1, "id9"}, args...))
	path := filepath.Join(t.TempDir(), "scripts.lua")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// luaList is vs as the items of a Lua table constructor.
func luaList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
