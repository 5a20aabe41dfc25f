package core

// SetMonoNow replaces the monotonic clock of the breaker and denial cache
// until the returned function restores it. Tests using it must not run in
// parallel with others.
func SetMonoNow(f func() int64) (restore func()) {
	old := monoNow
	monoNow = f
	return func() { monoNow = old }
}

// ScriptSHA is the decision script's SHA-1 digest.
func ScriptSHA() string { return tokenBucket.Hash() }

// BatchScriptSHA is the batch decision script's SHA-1 digest.
func BatchScriptSHA() string { return tokenBuckets.Hash() }
