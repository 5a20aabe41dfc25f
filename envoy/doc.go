// Package envoy serves Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on this
// library's core: the API that Envoy, Istio, Envoy Gateway and Contour call,
// with the configuration files of envoyproxy/ratelimit (the reference).
// The binary cmd/ratelimit-envoy is a drop-in for the reference's service;
// docs/envoy.md lists its variables and config keys beside the reference's.
//
// # Semantics
//
// Each rule is a token bucket holding requests_per_unit tokens, refilled
// over unit × unit_multiplier (not a fixed window). A request's descriptors
// are decided all or nothing, in one core.AllowAll: a refused request
// charges nothing. A request has at most 256 descriptors (more is
// InvalidArgument), and one whose caller has gone is not decided.
// hits_addend (per request, or per descriptor, which wins) is the cost; a
// descriptor's hits_addend of 0 is a check that takes nothing and is
// OVER_LIMIT when not one hit would pass (a request's 0 is unset: 1). A cost
// above the burst is OVER_LIMIT. is_negative_hits gives hits back, at most
// the burst, beside the decision and whatever the answer; usage (below) is
// charged after an admitted decision. A descriptor's own limit decides it
// in the same bucket as the rule it matches (what was spent carries over).
// requests_per_unit: 0 refuses and unlimited: true allows, without asking
// the store.
//
// Statuses come in descriptor order. limit_remaining is the whole tokens
// left; duration_until_reset is, as RateLimit-Reset, the time until the
// bucket is full again, and on OVER_LIMIT the time until the request could
// pass. In a refused request a descriptor within its limit says OK and keeps
// its remaining. Shadow mode (SHADOW_MODE, or shadow_mode on a rule) decides
// exactly as usual and reports the statuses, but never refuses a request
// for it (a request refused only by such rules is decided again without
// them).
//
// # Usage limits (our extension)
//
// A rule with usage: true under rate_limit counts usage reported after the
// response (an AI gateway sends the tokens a stream used when it ends): its
// hits are charged as debt (core.Limiter.Charge) and never refused, and a
// check against it (hits_addend 0, as a request starts) is OVER_LIMIT while
// the bucket owes, with duration_until_reset until the refill has repaid
// the debt and one token. The bucket owes at most one burst
// (requests_per_unit); a charge beyond is forgiven. A charge's status is OK
// with limit_remaining 0 while the bucket owes and duration_until_reset
// until it is full. A request is still all or nothing: a usage charge beside
// a descriptor that refuses the request is not charged (report usage in its
// own call). is_negative_hits on a usage rule gives tokens back, repaying
// the debt first; shadow mode reports a check in debt but never refuses for
// it, and charges as usual. The reference refuses the usage key.
//
// # Buckets
//
// A descriptor of domain D matching a rule decides the bucket of core
// policy Name = the rule's key, and key (subject) = the descriptor's values:
//
//	Name    D + "." + each matched level's "key" or "key_value" joined by "."
//	        (the reference's statistics key, such as "api.remote_address" or
//	        "api.header_match_login.user"); when that is not a valid core
//	        Name (over 64 bytes, spaces, braces, quotes, backslashes), "envoy-"
//	        and the first 32 hex digits of its SHA-256
//	subject the request's values in order joined by "|" ('\' and '|' inside a
//	        value escaped with '\'); one value is its own subject; a
//	        share_threshold wildcard level contributes its pattern, not the
//	        value, so every matching value shares one bucket
//
// So a Go service's middleware on the same store shares the mesh's bucket
// with core.Config{Name: "api.user", Limit: core.Limit{Rate: 100, Period:
// time.Minute}} and a key function returning the user's value. A
// descriptor with its own limit and no matching rule uses Name
// "envoy-descriptor-limit" and key D + "." + its keys joined by ".", then
// "|" and its values as above, so that a request creates no policy names.
//
// # Failures
//
// A request's decision is one store call (one per Cluster node, at once),
// bounded by ServiceConfig.Timeout (default 50ms) through core's bound and
// breakers, so a stalled store costs an answer one Timeout whatever the
// FailMode. On a Cluster, a refusal also waits for the give-back of what
// the other nodes took (a call per node, each bounded by the Timeout). Usage in such a request is not charged. When the store cannot
// decide, ShouldRateLimit returns a gRPC Unavailable error (Envoy's
// failure_mode_deny then decides, as with the reference) unless
// ServiceConfig.FailMode chose an answer.
package envoy
