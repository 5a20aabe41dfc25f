package grpc

import (
	"context"
	"log/slog"
	"maps"
	"strconv"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Option configures UnaryServerInterceptor and StreamServerInterceptor.
// Options are applied in order, then every setting left unset gets the
// default its With function names. A nil Option, or a With function given
// nil, panics at construction.
type Option func(*config)

type config struct {
	key     KeyFunc
	cost    func(ctx context.Context, fullMethod string) int
	skip    func(ctx context.Context, fullMethod string) bool
	observe func(ctx context.Context, fullMethod string, res core.Result, err error, dryRun bool)
	methods map[string]*core.Limiter
	style   HeaderStyle
	dryRun  bool
	logger  *slog.Logger
	also    []alsoCheck // WithAlso
}

// alsoCheck is one WithAlso.
type alsoCheck struct {
	lim *core.Limiter
	key KeyFunc
}

// HeaderStyle selects the rate-limit fields sent as response header
// metadata; see nethttp.HeaderStyle. The field names are the HTTP ones in
// lower case ("ratelimit-remaining"), the values the same.
type HeaderStyle = nethttp.HeaderStyle

// The header styles of nethttp.
const (
	HeadersDraft06 = nethttp.HeadersDraft06 // ratelimit-limit, -remaining, -reset, -policy; the default
	HeadersDraft11 = nethttp.HeadersDraft11 // ratelimit-policy and ratelimit structured fields
	HeadersLegacy  = nethttp.HeadersLegacy  // x-ratelimit-limit, -remaining, -reset (Unix seconds)
	HeadersNone    = nethttp.HeadersNone    // no rate-limit metadata
)

// WithKey sets how a call is turned into the key of its bucket. Default
// PeerIP(): the peer's address. A key error, or an empty key, refuses the
// call (see KeyFunc), never draws from a shared bucket.
func WithKey(k KeyFunc) Option {
	mustNotBeNil(k == nil, "WithKey")
	return func(c *config) { c.key = k }
}

// WithCost sets how many tokens a call spends; a stream spends it once,
// when it opens. Default 1. A cost below 1 or above the limit's burst is a
// bug in f: the call gets codes.Internal. To let a call through without
// counting it, use WithSkip.
func WithCost(f func(ctx context.Context, fullMethod string) int) Option {
	mustNotBeNil(f == nil, "WithCost")
	return func(c *config) { c.cost = f }
}

// WithSkip exempts the calls for which f returns true, such as health
// checks:
//
//	WithSkip(func(_ context.Context, m string) bool { return strings.HasPrefix(m, "/grpc.health.v1.Health/") })
//
// They get no key, no decision and no metadata. Default: no call is
// skipped.
func WithSkip(f func(ctx context.Context, fullMethod string) bool) Option {
	mustNotBeNil(f == nil, "WithSkip")
	return func(c *config) { c.skip = f }
}

// WithObserver calls f once for every call that is not skipped, before the
// handler runs or the call is refused: with the decision, or with the
// error that refuses the call (res then holds only the Name and Limit of
// the limiter the call went to; errors.Is(err, ErrKey) for a key error,
// else core.Limiter.AllowN's error for an invalid cost).
// dryRun reports WithDryRun: a refusal or an error did not stop the call.
// f runs on the call's goroutine: keep it fast. Default: none.
func WithObserver(f func(ctx context.Context, fullMethod string, res core.Result, err error, dryRun bool)) Option {
	mustNotBeNil(f == nil, "WithObserver")
	return func(c *config) { c.observe = f }
}

// WithMethods overrides the limiter per method, by full method name as
// gRPC reports it ("/pkg.Service/Method", grpc.UnaryServerInfo.FullMethod);
// calls to other methods use the interceptor's limiter. Each limiter has
// its own buckets (its Name), so a client's calls to a strict method do
// not spend its tokens for the others. The map is copied; calling
// WithMethods again adds to the methods.
//
// No name is silently ignored: WithMethods panics on a nil limiter or a
// name not of the form "/service/method"; the interceptor panics on a
// method that the protobuf registry (protoregistry.GlobalFiles) says the
// service does not have, and logs once, at the first call, the services
// the registry does not know (a misspelt name, or a service registered
// without a protobuf descriptor).
func WithMethods(methods map[string]*core.Limiter) Option {
	mustNotBeNil(methods == nil, "WithMethods")
	for m, l := range methods {
		if l == nil {
			panic("grpc: WithMethods: nil *core.Limiter for method " + strconv.Quote(m))
		}
		if _, _, ok := splitMethod(m); !ok {
			panic("grpc: WithMethods: method " + strconv.Quote(m) + ` is not a full method name "/pkg.Service/Method"`)
		}
	}
	methods = maps.Clone(methods)
	return func(c *config) {
		if c.methods == nil {
			c.methods = make(map[string]*core.Limiter, len(methods))
		}
		maps.Copy(c.methods, methods)
	}
}

// WithAlso limits each call by l too, on the key that key gives (the
// tenant in a metadata field, or a constant "*" for a global ceiling), in
// the same core.AllowAll call as the interceptor's own decision: all or
// nothing, one store round trip; several WithAlso add several checks, on
// the store of the interceptor's limiters (the interceptor panics when l
// uses another store than its own or a WithMethods limiter). As
// nethttp.WithAlso: every
// check takes the call's cost (one some check could never allow is
// codes.Internal, as WithCost says); the metadata describes the binding result
// and ratelimit-policy lists every check's policies; RetryInfo is the
// binding one's; a key function that fails is a key error as WithKey's,
// taking nothing. The in-flight interceptors panic when given it, as
// WithAlso does when l or key is nil.
func WithAlso(l *core.Limiter, key KeyFunc) Option {
	mustNotBeNil(l == nil, "WithAlso")
	mustNotBeNil(key == nil, "WithAlso")
	return func(c *config) { c.also = append(c.also, alsoCheck{lim: l, key: key}) }
}

// WithHeaders selects the rate-limit fields sent as response header
// metadata. Default HeadersDraft06. It panics on a style that is not one
// of the constants.
func WithHeaders(style HeaderStyle) Option {
	if style < HeadersDraft06 || style > HeadersNone {
		panic("grpc: WithHeaders: unknown " + style.String())
	}
	return func(c *config) { c.style = style }
}

// WithDryRun decides and counts every call and sends the metadata, but
// never refuses one: a denial, a key error or an invalid cost lets the
// call through (no status error). Use it with WithObserver to see what a
// limit would do before enforcing it.
func WithDryRun() Option {
	return func(c *config) { c.dryRun = true }
}

// WithLogger sets where calls that could not be rate limited are reported
// (a key error, an invalid cost), and the services WithMethods could not
// check. At most one warning per 10 seconds is logged, with how many such
// calls there were; no client-supplied text is logged. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	mustNotBeNil(l == nil, "WithLogger")
	return func(c *config) { c.logger = l }
}

func mustNotBeNil(isNil bool, name string) {
	if isNil {
		panic("grpc: " + name + "(nil)")
	}
}
