package core

import (
	"sync/atomic"
	"time"
)

// breaker stops calling a failing store. After failures consecutive
// failures it opens for cooldown; then one caller probes the store while the
// others stay degraded; the probe's success closes it, its failure re-opens
// it. While open, a decision costs no network at all.
type breaker struct {
	threshold int64
	cooldown  int64 // ns

	fails     atomic.Int64
	openUntil atomic.Int64 // monotonic ns; 0 when closed
	probing   atomic.Bool
}

// Times are the limiter's clock, in ns.

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

// success records a store answer; it reports whether that closed the breaker.
func (b *breaker) success(probe bool) (closed bool) {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if probe || b.openUntil.Load() != 0 {
		closed = b.openUntil.Swap(0) != 0
		b.probing.Store(false)
	}
	return closed
}

// failure records a failed store call; it reports whether that opened the
// breaker (a failed probe re-opens it without reporting again).
func (b *breaker) failure(probe bool, now int64) (opened bool) {
	if probe {
		b.openUntil.Store(now + b.cooldown)
		b.probing.Store(false)
		return false
	}
	if b.fails.Add(1) >= b.threshold && b.openUntil.Load() == 0 {
		return b.openUntil.CompareAndSwap(0, now+b.cooldown)
	}
	return false
}

// release gives back a probe slot whose call was never made.
func (b *breaker) release(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}
