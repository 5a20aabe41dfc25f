// Package transport carries package core's Redis store calls: each
// decision's request, the queues and carriers that batch requests into
// script calls, the lease calls of core.Concurrency (acquires batched
// per key, releases, renewals), their encoding and the replies, the
// scripts themselves, the deadline clock calls run under, and why a call
// failed (the client's dial errors, Redis's answers about slots and
// scripts). core.RedisStore is its exported face: it owns what a caller
// sees, this package how a decision travels. Nothing here is API.
package transport
