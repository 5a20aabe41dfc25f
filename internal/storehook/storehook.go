// Package storehook is how tests outside package core stand in for a
// store outside the process: core.Store is sealed (only core's RedisStore
// and MemoryStore implement it), so a test store is a function that
// package core wraps into a core.Store. Use it through package
// internal/fakestore, which gives it its types.
package storehook

// New is set by package core: it returns a core.Store (as any) whose
// calls the function f (core's hook function type, as any) answers. A
// Limiter decides through it as through a RedisStore: by the decision's
// deadline, through its breaker and denial cache. Its calls run on
// goroutines of their own, so a function that blocks past the deadline
// holds no caller.
var New func(f any) any
