package core

import (
	"cmp"
	"fmt"
	"log/slog"

	"github.com/sluicehq/ratelimit/internal/logline"
)

// reporter makes every degraded decision visible without flooding:
// Config.OnError hears each one, the log one line per interval at most,
// with how many there were (DESIGN §4). One per limiter.
type reporter struct {
	policy  string
	mode    FailMode
	onError func(error)
	logger  *slog.Logger
	every   int64 // ns between two log lines

	degraded logline.Line // times are the owner's clock
	recovery logline.Line
}

func newReporter(cfg *Config) reporter {
	return reporter{policy: cfg.Name, mode: cfg.FailMode, onError: cfg.OnError,
		logger: cmp.Or(cfg.Logger, slog.Default()), every: int64(orDefault(cfg.LogInterval, DefaultLogInterval))}
}

// degradedBy reports one decision FailMode made because of cause, at now.
func (r *reporter) degradedBy(cause error, now int64) {
	if r.onError != nil {
		r.onError(fmt.Errorf("core: limiter %q: store unavailable, FailMode %v decided: %w", r.policy, r.mode, cause))
	}
	if n, due := r.degraded.Count(now, r.every); due {
		r.logger.Warn("ratelimit: store unavailable; decisions degraded",
			"policy", r.policy, "fail_mode", r.mode.String(), "degraded", n, "cause", cause.Error())
	}
}

// recovered logs, at most once per interval, that the store answers again,
// with the degraded decisions not yet logged.
func (r *reporter) recovered(now int64) {
	if r.recovery.Due(now, r.every) {
		r.logger.Info("ratelimit: store answering again; decisions no longer degraded",
			"policy", r.policy, "degraded_since_last_log", r.degraded.Flush())
	}
}
