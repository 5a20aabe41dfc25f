package core

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicehq/ratelimit/internal/transport"
)

// instanceCount is how many instances FailLocal's in-process buckets
// share a limit with: Config.Instances, or with Instances 0 the live
// count learned from the store. Each such instance keeps itself in a live
// set of its policy in the store (a sorted set of instance ids scored by
// the store's clock): a decision that asks the store, when liveBeat has
// passed since the last heartbeat, starts one on a goroutine of its own —
// a tiny call, bounded and guarded as a decision is, which stamps this
// process and returns the members stamped within liveTTL. FailLocal
// divides by the last count seen; an outage keeps it. Until its first
// heartbeat is answered an instance counts itself alone (1).
type instanceCount struct {
	n     atomic.Int64 // in use; at least 1
	learn bool         // n is learned from the live set
	next  atomic.Int64 // a learning count's next heartbeat, on its guard's clock
}

// Heartbeats: one per liveBeat at most, while decisions ask the store; an
// instance not stamped for liveTTL (stopped, scaled down, idle) leaves
// the count.
const (
	liveBeat = 2 * time.Second
	liveTTL  = 5 * liveBeat
)

// maxLearned bounds a learned count, whatever a live set says.
const maxLearned = 1 << 16

// newInstanceCount returns FailLocal's count: instances, or with 0 one
// learned (starting at 1).
func newInstanceCount(instances int) *instanceCount {
	c := &instanceCount{learn: instances == 0}
	c.n.Store(int64(max(1, instances)))
	return c
}

// get returns the count in use.
func (c *instanceCount) get() int { return int(c.n.Load()) }

// beat starts a heartbeat when one is due (see instanceCount); it costs
// a decision two atomic loads otherwise.
func (g *guard) beat() {
	c := g.fallback.count
	if c == nil || !c.learn || !g.store.remote() {
		return
	}
	now, next := g.clock(), c.next.Load()
	if now < next || !c.next.CompareAndSwap(next, now+int64(liveBeat)) {
		return
	}
	go g.heartbeat()
}

// heartbeat stamps this process in its policy's live set, through the
// guard, and keeps the count the store returns. A failure leaves the
// count as it was, and counts toward the breaker as any store call.
func (g *guard) heartbeat() {
	if c := g.fallback.count; c == nil || !c.learn {
		return
	}
	var n int
	deadline := time.Now().Add(g.timeout)
	_, err := g.call(context.Background(), transport.LiveSubj, deadline, func(ctx context.Context) (err error) {
		a, err := g.store.lease(ctx, leaseCall{op: leaseLive, deadline: deadline, bound: g.bound, name: g.report.policy, lease: liveTTL})
		n = a.Held
		return err
	})
	if err == nil {
		g.fallback.count.n.Store(int64(min(max(n, 1), maxLearned)))
	}
}
