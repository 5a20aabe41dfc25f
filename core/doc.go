// Package core decides rate limits: one limit per key, shared exactly by
// every instance of a service when its buckets live in Redis.
//
// A Limiter holds a token bucket per key (a client address, an API key, a
// user): Limit.Rate tokens are added every Limit.Period, up to Limit.Burst,
// and a request costing n tokens is allowed when the bucket holds n. Make
// one Limiter per policy at start-up with New and share it; Allow and
// AllowN decide, Reset refills a key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store := core.NewRedisStore(rdb, core.WithPrefix("myapp:"))
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(100), FailMode: core.FailOpen})
//	…
//	res, err := lim.Allow(ctx, "user-42") // err only for a caller's mistake, such as an empty key
//	if !res.Allowed { /* refuse; retry in res.RetryAfter */ }
//
// The HTTP middleware for net/http, chi, echo and gin is in the sibling
// packages nethttp, chi, echo and gin; keys come from package keyfuncs.
//
// # Stores
//
// NewRedisStore shares buckets between instances: every decision is one Lua
// script on the Redis server, timed by Redis's own clock, in integers that
// never drift, so the admitted cost never exceeds Burst plus the refill
// however many instances ask at once. Concurrent decisions batch themselves
// into one script call, without a timer. It works with every
// redis.UniversalClient: standalone, Sentinel, Cluster and Ring. Give the
// client ContextTimeoutEnabled: true, so a stalled Redis frees the
// connection at each decision's deadline; go-redis's default MaxRetries is
// safe, as a re-sent script is charged once. Call RedisStore.Preload at
// start-up or from a readiness check: it loads the script and tells
// whether Redis answers. Give each app sharing a Redis its own prefix with
// WithPrefix.
//
// NewMemoryStore keeps buckets in this process with the same semantics: for
// a single instance, tests (WithClock moves its time without sleeping) and
// FailLocal's fallback.
//
// # When the store fails
//
// Config.FailMode has no default; New refuses a Config without one:
//
//   - FailOpen allows: fairness limits on public APIs.
//   - FailClosed denies (the middleware answers 503): login and
//     brute-force protection.
//   - FailLocal decides with an in-process bucket holding the limit
//     divided by Config.Instances.
//
// A decision waits at most Config.Timeout (default 50ms), and a circuit
// breaker, the store's, one per node of a Cluster or Ring for every
// limiter on the store, stops calling a failing Redis for a short
// cool-down. A decision the store could not make says
// Result.Degraded and reaches Config.Observer (with its cause) and, at
// most once per 10 seconds, Config.Logger. The caller's context gives a
// decision its values, never its cancellation or deadline: a request whose
// client went away is still decided and counted.
//
// # Several keys, hot keys
//
// AllowAll decides several keys at once (a client, its tenant, a route's
// ceiling), all or nothing: one atomic script call per store node, and on
// a Cluster a refusal gives back what the other nodes took. With
// Config.Borrow, a hot allowed key is decided in process from a slice
// borrowed from its bucket, within the same limit across instances.
//
// # Keys in Redis
//
// A bucket's key is <prefix>{<subject>}:<policy>, the prefix "ratelimit:"
// unless WithPrefix says otherwise, the policy Config.Name (default the
// limit, such as "100-per-1m0s"). The braces are a Cluster hash tag: every
// policy of a subject is in one slot, so several limits (Config.Extra) are
// checked in one script, all or nothing. Long or unusual subjects are
// hashed. A key expires once its bucket would be full again.
//
// # Concurrency
//
// Limiter, RedisStore and MemoryStore are safe for concurrent use. A
// Limiter is meant to be made once and shared by every request. A store
// may serve several limiters; they share buckets only when given the same
// Config.Name on purpose, and New refuses a limiter whose name another
// live limiter on that store took by default.
package core
