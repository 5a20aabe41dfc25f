package core

// LeaseObserver is an Observer that also follows a Concurrency's leases:
// a Concurrency whose ConcurrencyConfig.Observer implements it calls
// Leases when this instance takes or gives back a slot, when its renewals
// run, and when a store call finds leases past their deadline. A
// metrics.Collector is one. Leases is called on the request's goroutine
// or the renewal goroutine and must be fast and safe for concurrent use.
type LeaseObserver interface {
	Observer
	Leases(e LeaseEvent)
}

// LeaseEvent describes a change in a Concurrency's leases to a
// LeaseObserver. It never carries a key.
type LeaseEvent struct {
	Policy string // ConcurrencyConfig.Name
	// Held is the change in the slots held by this instance's requests:
	// 1 for an acquire that took one (in the store, or FailLocal's in
	// process), -1 at its Release. FailOpen's leases hold nothing.
	Held int
	// Expired counts the leases that a store call of this instance found
	// past their deadline and removed: leases whose holders, on any
	// instance, stopped renewing without releasing (a crash, a lost
	// store). A key that nobody asks about again expires whole in Redis,
	// uncounted.
	Expired int
	// Renewed counts the leases a renewal round extended.
	Renewed int
}
