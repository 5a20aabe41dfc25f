package core

import (
	"cmp"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicehq/ratelimit/internal/logline"
)

// reporter logs store failures without flooding, the same for every kind
// of limiter: one line per logInterval at most, naming the policy, with
// how many there were (DESIGN §4); the Observer hears each degraded
// decision (guard.decided). One per limiter.
type reporter struct {
	policy  string
	mode    FailMode
	timeout time.Duration // the limiter's Timeout, which a timed-out line gives
	logger  *slog.Logger
	count   *instanceCount // FailLocal's, which a line gives; else nil

	degraded logline.Line // times are the owner's clock
	recovery logline.Line
}

// logInterval is the least time between two lines of one limiter's log
// about its store: an outage of any length logs a line per limiter and
// logInterval, with how many decisions it degraded meanwhile.
const logInterval = int64(10 * time.Second)

func newReporter(cfg guardConfig) reporter {
	return reporter{policy: cfg.name, mode: cfg.mode, logger: cmp.Or(cfg.logger, slog.Default())}
}

// degradedBy counts one store call that failed because of cause, at now,
// and logs it when due: a decision FailMode then made (op ""), or a
// release or renewal (op names it) that the store could not make.
func (r *reporter) degradedBy(op string, cause error, now int64) {
	if n, due := r.degraded.Count(now, logInterval); due {
		msg := "ratelimit: store unavailable; decisions degraded"
		if errors.Is(cause, ErrTimeout) {
			msg = "ratelimit: store decision timed out after " + r.timeout.String() + "; decisions degraded"
		}
		args := []any{"policy", r.policy, "fail_mode", r.mode.String(), "degraded", n, "cause", cause.Error()}
		if r.count != nil {
			args = append(args, "instances", r.count.get())
		}
		if op != "" {
			args = append(args, "op", op)
		}
		r.logger.Warn(msg, args...)
	}
}

// opened logs, at most once per interval and node, that a call of this
// limiter, failed because of cause, opened br for cooldown, with the
// openings of br not yet logged.
func (r *reporter) opened(br *breaker, cause error, cooldown time.Duration, now int64) {
	if n, due := br.opens.Count(now, logInterval); due {
		args := []any{"policy", r.policy, "cooldown", cooldown.String(), "openings", n, "cause", cause.Error()}
		if br.node != "" {
			args = append(args, "node", br.node)
		}
		r.logger.Warn("ratelimit: circuit breaker open; store node not called until a probe answers", args...)
	}
}

// recovered logs, at most once per interval, that the store (node, when
// it has several) answers again, with the degraded decisions not yet
// logged.
func (r *reporter) recovered(node string, now int64) {
	if r.recovery.Due(now, logInterval) {
		args := []any{"policy", r.policy, "degraded_since_last_log", r.degraded.Flush()}
		if node != "" {
			args = append(args, "node", node)
		}
		r.logger.Info("ratelimit: store answering again; decisions no longer degraded", args...)
	}
}
