package core

import "time"

// SetClock replaces l's clock for its circuit breakers, denial cache and
// log throttle: now returns the time since an arbitrary start.
func SetClock(l *Limiter, now func() time.Duration) {
	l.clock = func() int64 { return int64(now()) }
}

// ScriptSHA is the decision script's SHA-1 digest.
func ScriptSHA() string { return tokenBuckets.Hash() }

// LimitSets is how many per-request limits l keeps the arithmetic of.
func LimitSets(l *Limiter) int {
	l.perLimit.mu.RLock()
	defer l.perLimit.mu.RUnlock()
	return len(l.perLimit.m)
}

// MaxLimitSets bounds LimitSets.
const MaxLimitSets = maxLimitSets

// StoreRunning is how many decisions s has queued or in a call.
func StoreRunning(s *RedisStore) int64 { return s.running.Load() }
