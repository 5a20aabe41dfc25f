package core

import (
	"fmt"
	"log/slog"
	"sync/atomic"
)

// reporter makes every degraded decision visible without flooding:
// Config.OnError hears each one, the log one line per interval at most,
// with how many there were (DESIGN §4). One per limiter.
type reporter struct {
	policy   string
	mode     FailMode
	onError  func(error)
	logger   *slog.Logger
	interval int64 // ns

	lastLog      atomic.Int64 // ns on the owner's clock
	lastRecovery atomic.Int64
	degraded     atomic.Int64 // degraded decisions since the last log line
}

// degradedBy reports one decision FailMode made because of cause, at now.
func (r *reporter) degradedBy(cause error, now int64) {
	if r.onError != nil {
		r.onError(fmt.Errorf("core: limiter %q: store unavailable, FailMode %v decided: %w", r.policy, r.mode, cause))
	}
	r.degraded.Add(1)
	if !due(&r.lastLog, r.interval, now) {
		return
	}
	r.logger.Warn("ratelimit: store unavailable; decisions degraded",
		"policy", r.policy, "fail_mode", r.mode.String(), "degraded", r.degraded.Swap(0), "cause", cause.Error())
}

// recovered logs, at most once per interval, that the store answers again,
// with the degraded decisions not yet logged.
func (r *reporter) recovered(now int64) {
	if !due(&r.lastRecovery, r.interval, now) {
		return
	}
	r.logger.Info("ratelimit: store answering again; decisions no longer degraded",
		"policy", r.policy, "degraded_since_last_log", r.degraded.Swap(0))
}

// due reports whether a line rate-limited to one per interval (ns) may be
// logged at now, and if so claims the slot: exactly one caller wins it.
func due(last *atomic.Int64, interval, now int64) bool {
	prev := last.Load()
	return (prev == 0 || now-prev >= interval) && last.CompareAndSwap(prev, now)
}
