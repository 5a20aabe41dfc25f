// Package bucket is the integer token-bucket arithmetic every store of
// package core computes with, and its in-process tables.
//
// A limit becomes a Policy: tokens counted in units, Unit units to a
// token, Refill units arriving every Tick microseconds. Every quantity
// stays below 2^53 (MaxExact), where the arithmetic is exact in int64
// and in the Lua numbers (doubles) of the Redis scripts alike, so no
// rounding ever accumulates and the memory store and the scripts decide
// identically. An Ask is one decision asked of a store; an Outcome is its
// answer for one policy.
//
// A decision of the memory store reads top to bottom: Table (table.go:
// Apply, Take1) locks a shard and finds the buckets in its open-addressing
// table (memtable.go), whose stored state the arithmetic reads and
// decides (arith.go, waiting.go). Leases (lease.go) is the in-process
// lease set of core's in-flight limiter. Lender (loans.go) is the model of
// a bucket that lends slices of itself to instances (borrowing), proven by
// a property test to admit no more than the plain bucket.
//
// Package core owns the public names; this package is internal so that its
// types can change with the stores that use them.
package bucket
