// Package grpc rate-limits gRPC servers with the limiters of package core:
// unary and stream server interceptors that decide each call before its
// handler runs, on the same buckets, stores and failure modes as the HTTP
// middleware. Documentation imports it under the name ratelimit:
//
//	import ratelimit "github.com/sluicehq/ratelimit/grpc"
//
//	lim, err := core.New(core.Config{Store: store, Limit: core.PerSecond(100), FailMode: core.FailOpen})
//	…
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(lim)),
//		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(lim)),
//	)
//
// # Keys
//
// The default key is the peer address, PeerIP(): with the options, rules
// and key formats of keyfuncs.IP, so x-forwarded-for metadata counts only
// with keyfuncs.TrustedProxies and only from a peer inside its networks.
// Metadata keys a call by an API key (hashed), ContextUser and User by the
// user an authentication interceptor found, Method by the method. The keys
// are keyfuncs' keys: an HTTP middleware and an interceptor whose limiters
// share a Name share a client's bucket.
//
// # What a client sees
//
// An allowed call gets the rate-limit fields as response header metadata,
// the HTTP fields' names in lower case with the same values
// (WithHeaders selects the style):
//
//	ratelimit-limit: 3
//	ratelimit-remaining: 2
//	ratelimit-reset: 20
//	ratelimit-policy: 3;w=60
//
// A refused call gets the metadata too, and a status error:
//
//   - codes.ResourceExhausted when the bucket lacks the tokens (or
//     core.FailLocal's in-process bucket does), with a google.rpc.RetryInfo
//     detail whose retry_delay is core.Result.RetryAfter;
//   - codes.Unavailable, with RetryInfo, while the store is down and the
//     limiter is core.FailClosed; core.FailOpen lets the call through. A
//     degraded decision sends no rate-limit metadata: its numbers would be
//     fiction;
//   - codes.InvalidArgument when the key is the client's to send and it did
//     not (no API key, an x-forwarded-for from a trusted proxy that cannot
//     be believed), with a message naming what is missing, never echoing
//     what was sent; a KeyFunc's error carrying a gRPC status reaches the
//     client as it is;
//   - codes.Internal for the server's own bug: a KeyFunc returning "" with
//     no error, a peer that is not an IP address, a cost the limiter
//     refuses. These are logged, at most once per 10 seconds.
//
// A gRPC client retries a call only under a retry policy, which usually
// names Unavailable and not ResourceExhausted: a client refused with
// either reads the RetryInfo (status.Details) and waits retry_delay.
//
// A stream is decided once, when it opens: its messages spend nothing.
// Per-method limits (WithMethods) go by full method name, skipped calls
// (WithSkip, health checks) spend nothing, and WithCost, WithDryRun,
// WithObserver and WithAlso (another limiter on another key, decided with
// the call's own in one core.AllowAll) work as in package nethttp.
//
// ConcurrencyUnaryServerInterceptor and ConcurrencyStreamServerInterceptor
// limit calls in flight instead (core.Concurrency): a call or stream holds
// a slot of its key from its start until it ends.
//
// # Module
//
// This package is a module of its own, github.com/sluicehq/ratelimit/grpc,
// so that services using only net/http never download gRPC: their go.sum
// does not change. It requires the github.com/sluicehq/ratelimit release
// of the same version; the replace directive in its go.mod points at the
// parent directory for development in this repository, and Go ignores it
// in any other module's build, where the ratelimit version is the highest
// that the module graph requires.
package grpc
