package core

// TakeFromSlice takes n tokens of key from l's slice in hand, never from
// the store and never borrowing: an instance still deciding from a slice
// it borrowed before it was redeployed. It reports whether it took them.
func TakeFromSlice(l *Limiter, key string, n int) bool {
	_, _, ok := l.borrow.takeHeld(l.clock(), l.store.subject(key), int64(n), l.set)
	return ok
}
