package core

import (
	"math"
	"testing"
	"time"
)

// TestDenyCacheLateAnswers (issue 36, item 1): Redis 30 ms away, a token
// every 20 ms, Timeout 50 ms. An answer that arrives after the deadline
// it gives still denies the callers that arrived before that deadline,
// and sends the key's next callers through probes, one every
// probeEvery: (50 - 30) / 2 = 10 ms here. Before, such an answer cached
// nothing, so every caller of a flooded key sent its own call, and the
// callers that waited for a probe asked again after it (two round trips:
// past Timeout, and FailOpen admitted them).
func TestDenyCacheLateAnswers(t *testing.T) {
	lim := PerSecond(50)
	ms := int64(time.Millisecond)
	denied := func(retry int64) Result {
		return Result{Limit: lim, RetryAfter: time.Duration(retry), ResetAfter: time.Duration(retry)}
	}
	c := newDenyCache(64, 50*time.Millisecond)
	const s = 1000 * int64(time.Second)
	look := func(what string, arrival, now int64, want int) (Result, <-chan struct{}, int64) {
		t.Helper()
		r, ch, at, got := c.lookup(cacheAsk{subject: "k", n: 1, lim: lim}, arrival, now)
		if got != want {
			t.Fatalf("%s: lookup %d, want %d", what, got, want)
		}
		return r, ch, at
	}
	look("first caller", s, s, cacheMiss)
	c.record(cacheAsk{subject: "k", n: 1, lim: lim}, s, s+30*ms, denied(20*ms), false) // deadline s+20ms, passed on arrival

	r, _, _ := look("arrived at +10ms, during the call", s+10*ms, s+30*ms, cacheDeny)
	if r.Allowed || r.RetryAfter != 0 {
		t.Errorf("caller denied after the deadline: %+v, want denied with RetryAfter 0", r)
	}
	look("arrived at +25ms", s+25*ms, s+30*ms, cacheProbe)
	// Callers wait for the probe, 10 ms at most, then one probes again.
	_, wake, at := look("arrived at +27ms", s+27*ms, s+30*ms, cacheWait)
	if at != s+40*ms {
		t.Errorf("waiter told to look again at +%dms, want +40ms", (at-s)/ms)
	}
	_, wake2, _ := look("arrived at +32ms", s+32*ms, s+32*ms, cacheWait)
	look("arrived at +35ms, at +40ms", s+35*ms, s+40*ms, cacheProbe)
	_, wake3, _ := look("arrived at +41ms", s+41*ms, s+41*ms, cacheWait)

	// The probe sent at +30ms: denied, a token 5 ms after it left.
	c.record(cacheAsk{subject: "k", n: 1, lim: lim}, s+30*ms, s+60*ms, denied(5*ms), true)
	for _, ch := range []<-chan struct{}{wake, wake2, wake3} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not woken by the answer")
		}
	}
	look("the waiter arrived at +27ms", s+27*ms, s+60*ms, cacheDeny)
	look("the waiter arrived at +32ms", s+32*ms, s+60*ms, cacheDeny)
	look("the waiter arrived at +41ms, at +45ms", s+41*ms, s+45*ms, cacheWait)
	look("the waiter arrived at +41ms, at +50ms: the +40ms probe is 10 ms old", s+41*ms, s+50*ms, cacheProbe)
	// A caller without the time for a round trip of its own (30 ms, the
	// last answer's) waits for an answer instead.
	if _, _, at := look("arrived at +36ms, at +61ms", s+36*ms, s+61*ms, cacheWait); at != math.MaxInt64 {
		t.Errorf("caller without time told to look again at +%dms, want at the answer", (at-s)/ms)
	}

	// The probe sent at +40ms: allowed with a token to spare. The callers
	// waiting ask the store — but those that a probe sent since they
	// arrived may still prove denied wait for it; the next ones go on
	// probing: the key may still be flooded.
	spare := Result{Allowed: true, Limit: lim, Remaining: 1, ResetAfter: 20 * time.Millisecond}
	c.record(cacheAsk{subject: "k", n: 1, lim: lim}, s+40*ms, s+70*ms, spare, true)
	look("the caller arrived at +36ms, the +50ms probe out", s+36*ms, s+70*ms, cacheWait)
	look("the caller arrived at +55ms, after a spare token", s+55*ms, s+70*ms, cacheMiss)
	look("arrived at +71ms: the +50ms probe is 21 ms old", s+71*ms, s+71*ms, cacheProbe)
	// The probe sent at +50ms: 12 tokens left, a quarter of the burst.
	// The key is no longer short: its callers ask the store.
	c.record(cacheAsk{subject: "k", n: 1, lim: lim}, s+50*ms, s+80*ms, Result{Allowed: true, Limit: lim, Remaining: 12, ResetAfter: 760 * time.Millisecond}, true)
	look("arrived at +81ms", s+81*ms, s+81*ms, cacheMiss)
}

// TestDenyCacheLimitsPerSubject: a subject keeps a denial per limit, at
// most maxLimits, and the shard counts every one against its share of
// DenyCacheSize: more limits replace the oldest, a refund forgets them
// all.
func TestDenyCacheLimitsPerSubject(t *testing.T) {
	c := newDenyCache(32*8, time.Second) // 8 denials per shard
	const s = 1000 * int64(time.Second)
	denied := func(lim Limit) Result { return Result{Limit: lim, RetryAfter: time.Hour, ResetAfter: time.Hour} }
	var lims []Limit
	for i := range maxLimits + 2 {
		lim := PerHour(10 + i)
		lims = append(lims, lim)
		c.record(cacheAsk{subject: "k", n: 1, lim: lim}, s, s+1, denied(lim), false)
	}
	sh := c.shard("k")
	if sh.size != maxLimits {
		t.Fatalf("shard holds %d denials, want %d", sh.size, maxLimits)
	}
	for i, lim := range lims {
		want := cacheDeny
		if i < len(lims)-maxLimits {
			want = cacheMiss // replaced by newer limits
		}
		if _, _, _, got := c.lookup(cacheAsk{subject: "k", n: 1, lim: lim}, s+2, s+2); got != want {
			t.Errorf("limit %d: lookup %d, want %d", i, got, want)
		}
	}
	c.forget("k", s+3, int64(time.Second))
	if sh.size != 1 {
		t.Fatalf("after forget the shard holds %d, want the tombstone alone", sh.size)
	}
	for _, lim := range lims {
		if _, _, _, got := c.lookup(cacheAsk{subject: "k", n: 1, lim: lim}, s+4, s+4); got != cacheMiss {
			t.Errorf("after forget: lookup %d, want a miss", got)
		}
	}
	// An answer sent after the refund replaces the tombstone.
	c.record(cacheAsk{subject: "k", n: 1, lim: lims[0]}, s+5, s+6, denied(lims[0]), false)
	if sh.size != 1 {
		t.Fatalf("after a new denial the shard holds %d, want 1", sh.size)
	}
}
