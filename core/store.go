package core

// Store keeps the buckets (and a Concurrency's leases) and decides
// atomically: NewRedisStore shares them across instances, NewMemoryStore
// keeps them in this process. It is sealed (its methods are unexported):
// every guarantee a limiter makes — all or nothing across limits, exactly
// once under re-sent calls, the store's clock, leases that end by
// themselves — is the store's, and only these two are tested to keep
// them. Tests stand in for a failing store through internal/fakestore.
//
// A Store is safe for concurrent use, and may be shared by any number of
// limiters.
type Store interface {
	storeCalls
}
