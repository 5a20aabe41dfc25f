package core

import (
	"errors"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// Errors returned by New for a configuration that cannot work.
var (
	ErrNoStore         = errors.New("core: Config.Store is nil")
	ErrFailModeUnset   = errors.New("core: Config.FailMode is not set; choose core.FailOpen (allow when the store is down), core.FailClosed (deny with 503) or core.FailLocal (in-process limits of Limit/Instances)")
	ErrInvalidFailMode = errors.New("core: unknown Config.FailMode; choose core.FailOpen, core.FailClosed or core.FailLocal")
	ErrInvalidLimit    = bucket.ErrInvalidLimit  // core: invalid limit
	ErrInvalidConfig   = bucket.ErrInvalidConfig // core: invalid config
)

// Errors returned by Allow and AllowN for a caller's mistake. Store trouble is
// never an error: it is what Config.FailMode decides (see Result.Degraded).
var (
	ErrEmptyKey    = bucket.ErrEmptyKey    // core: empty key
	ErrInvalidCost = bucket.ErrInvalidCost // core: cost must be at least 1
	ErrCostTooHigh = bucket.ErrCostTooHigh // core: cost exceeds the bucket capacity (Burst) and could never be allowed
)

// Errors a store failure is reported with: DecisionEvent.Err, and the
// log line's cause.
var (
	ErrTimeout     = transport.ErrTimeout
	ErrCircuitOpen = errors.New("core: circuit breaker open; store not called")
	ErrOverloaded  = transport.ErrOverloaded
	ErrBadReply    = transport.ErrBadReply
)
