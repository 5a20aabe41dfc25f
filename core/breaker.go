package core

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sluicehq/ratelimit/internal/logline"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// breaker stops calling a failing store node. It is the store's, shared
// by every limiter on it (see nodeBreakers), and counts failed store
// calls, not the decisions riding in them: a batch of a hundred decisions
// that failed together is one failure. When a limiter's call makes the
// consecutive failed calls reach that limiter's threshold it opens for
// that limiter's cooldown (its trip); then one caller probes the store
// while the others stay degraded; the probe's success closes it, its
// failure re-opens it. While open, a decision costs no network at all.
//
// Of a limiter it keeps one thing, weakly: the guard whose call opened it,
// so that the Observer told of an opening is told of its closing (a gauge
// per policy never stays open; see Observer.BreakerChange). Weakly, so
// that an outage does not keep a dropped limiter alive: the closing of a
// breaker whose opener is gone is told by the guard whose probe closed it.
type breaker struct {
	node string // the node's address, for the log; "" for a store of one node

	fails     atomic.Int64
	openUntil atomic.Int64 // monotonic ns; 0 when closed
	probing   atomic.Bool
	opener    atomic.Pointer[weak.Pointer[guard]] // whose call opened it: it reports the closing too
	opens     logline.Line                        // the log line of its openings

	mu      sync.Mutex
	counted [8]uint64 // the last failed calls counted, by call id
	next    int
}

// trip is how a limiter's failed calls open a breaker: at failures
// consecutive failed calls, for cooldown (BreakerFailures and
// BreakerCooldown).
type trip struct {
	failures int64
	cooldown int64 // ns
}

// Times are ns on the package's monotonic clock (a test may give a
// limiter its own).

// allow reports whether to call the store at now, and whether that call is
// the probe of a half-open breaker.
func (b *breaker) allow(now int64) (call, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now < until {
		return false, false
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// retryIn is how long until the store will be tried again; 0 when closed.
func (b *breaker) retryIn(now int64) time.Duration {
	until := b.openUntil.Load()
	if until == 0 {
		return 0
	}
	if d := until - now; d > 0 {
		return time.Duration(d)
	}
	return 0
}

// success records a store answer; it reports whether that closed the
// breaker. Only the probe closes an open breaker: a call that was already
// in flight when it opened proves nothing about the store now.
func (b *breaker) success(probe bool) (closed bool) {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if probe {
		closed = b.openUntil.Swap(0) != 0
		b.probing.Store(false)
	}
	return closed
}

// failedCall records that the store call call (0: unknown, each then
// counts) failed for one of its decisions, under t; it reports whether
// that opened the breaker (a failed probe re-opens it without reporting
// again). The other decisions of a call already counted count nothing.
func (b *breaker) failedCall(probe bool, now int64, call uint64, t trip) (opened bool) {
	if probe {
		b.openUntil.Store(now + t.cooldown)
		b.probing.Store(false)
		return false
	}
	if call != 0 && !b.first(call) {
		return false
	}
	if b.fails.Add(1) >= t.failures && b.openUntil.Load() == 0 {
		return b.openUntil.CompareAndSwap(0, now+t.cooldown)
	}
	return false
}

// first reports whether call is a failed call not counted yet, and notes
// it. The decisions of one call fail together, so a few recent ids are
// enough.
func (b *breaker) first(call uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.counted {
		if c == call {
			return false
		}
	}
	b.counted[b.next] = call
	b.next = (b.next + 1) % len(b.counted)
	return true
}

// release gives back a probe slot whose call was never made.
func (b *breaker) release(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

// callOf returns the id of the failed store call err comes from, or 0
// when the store does not say (each failure then counts).
func callOf(err error) uint64 {
	var ce *transport.CallError
	if errors.As(err, &ce) {
		return ce.Call
	}
	return 0
}

// nodeBreakers holds a store's breakers: one per store node (Redis
// Cluster shard, Ring shard), so a dead node degrades only the subjects it
// owns; a store of one node has one. They are the store's, not a
// limiter's: every Limiter and Concurrency on the store reaches a node
// through its one breaker, so one outage is one opening per node,
// whatever the number of limiters (DESIGN §4).
type nodeBreakers struct {
	one    breaker                     // the store's, or its only node's
	byNode sync.Map                    // node → *breaker, when node is set
	node   func(subject string) string // the node deciding subject; nil: one
}

// forKey returns the breaker of the node deciding key.
func (nb *nodeBreakers) forKey(key string) *breaker {
	if nb.node == nil {
		return &nb.one
	}
	node := nb.node(key)
	if b, ok := nb.byNode.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := nb.byNode.LoadOrStore(node, &breaker{node: node})
	return b.(*breaker)
}
