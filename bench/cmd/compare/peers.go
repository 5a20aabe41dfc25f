package main

import (
	"fmt"
	"time"

	"github.com/sluicehq/ratelimit/bench"
)

// ratelimitPeer is bench's ratelimit peer named name, its Env changed by
// set for every instance it builds.
func ratelimitPeer(name string, set func(*bench.Env)) bench.Peer {
	return bench.Peer{Name: name, Redis: true, New: func(env *bench.Env, lim bench.Limit, prefix string) (*bench.Instance, error) {
		e := *env
		set(&e)
		return bench.RedisPeers[0].New(&e, lim, prefix)
	}}
}

// defaultTimeoutPeers are ratelimit with its default Timeout on both client
// settings, then redis_rate: the RTT and Cluster tables' rows.
func defaultTimeoutPeers() []bench.Peer {
	return []bench.Peer{
		ratelimitPeer("ratelimit (ContextTimeoutEnabled)", func(e *bench.Env) { e.Timeout = 0 }),
		ratelimitPeer("ratelimit (plain redis.NewClient)", func(e *bench.Env) { e.Timeout, e.PlainClient = 0, true }),
		bench.RedisPeers[1],
	}
}

// timeoutText names a ratelimit Config.Timeout, 0 being the default.
func timeoutText(d time.Duration) string {
	if d == 0 {
		return "50ms (the default)"
	}
	return d.String()
}

// vsRedisRate is the ratio cell of a ratelimit row against redis_rate, on
// the decisions that did not fail: a FailMode decision is fast and proves
// nothing about the store path.
func vsRedisRate(p bench.Peer, res map[string]*cell) string {
	if p.Name == bench.RedisPeers[1].Name {
		return "—"
	}
	return fmt.Sprintf("%.2f×", ratioBy(bench.Measurement.DecidedPerSec, res[p.Name], res[bench.RedisPeers[1].Name]))
}

// latencyText is an added latency as "+30 ms".
func latencyText(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return fmt.Sprintf("+%d ms", d.Milliseconds())
	}
	return "+" + d.String()
}
