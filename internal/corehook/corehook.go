// Package corehook lets this module's packages reach what package core
// does not export, because only they need it. Package core fills it in
// when it is loaded.
package corehook

import (
	"context"
	"time"
)

// Pause makes the bucket of key under limiter l (a *core.Limiter: corehook
// cannot import core) owe at least what refills in d, at most a day, so
// that every instance sharing it waits d: an upstream's Retry-After, for
// nethttp's Transport. Store trouble is decided as for a charge.
var Pause func(l any, ctx context.Context, key string, d time.Duration)

// ReserveWithin is core's ReserveN for limiter l (a *core.Limiter),
// booking at most most ahead (at most l's Config.MaxWait): it returns the
// *core.Reservation, for nethttp's WithDelay.
var ReserveWithin func(l any, ctx context.Context, key string, n int, most time.Duration) (any, error)

// MaxWait returns the Config.MaxWait of limiter l (a *core.Limiter).
var MaxWait func(l any) time.Duration
