package grpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/logline"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// UnaryServerInterceptor returns a gRPC unary server interceptor limiting
// calls with l: each call's key (WithKey, default the peer address) spends
// its cost (WithCost, default 1 token) from its bucket, before the
// handler runs. An allowed call gets the rate-limit fields as response
// header metadata and goes on to the handler; a refused one gets
// codes.ResourceExhausted with a google.rpc.RetryInfo detail, or
// codes.Unavailable when the store is down and l is core.FailClosed (see
// the package documentation). It panics if l is nil, an option is nil, or
// a WithMethods name is a method its service does not have (by the
// protobuf registry); a WithMethods service the registry does not know
// is logged once, at the first call, not refused (see WithMethods).
func UnaryServerInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	in := newRateInterceptor(l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := in.decide(ctx, info.FullMethod)
		if md != nil {
			_ = grpc.SetHeader(ctx, md) // fails only outside a server call
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: a stream
// is decided once, when it opens, before the handler runs; the messages it
// carries then spend nothing. The metadata is the stream's header.
func StreamServerInterceptor(l *core.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	in := newRateInterceptor(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := in.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md) // fails only once the header was sent
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// interceptor is the behaviour every interceptor of this package shares,
// built once: the options, key errors and their log.
type interceptor struct {
	config

	// The log line of calls that could not be rate limited (times:
	// monotonic ns since epoch).
	failures logline.Line
}

// rateInterceptor is the behaviour of the rate-limit interceptors.
type rateInterceptor struct {
	*interceptor
	def       *core.Limiter
	fields    map[*core.Limiter]*nethttp.Fields // each limiter's header values, formatted once
	unchecked []string                          // WithMethods services the registry does not know
	checkLog  sync.Once                         // logs unchecked at the first call
}

// newInterceptor applies opts, then fills in the defaults.
func newInterceptor(opts []Option) *interceptor {
	in := &interceptor{}
	for _, o := range opts {
		if o == nil {
			panic("grpc: nil Option")
		}
		o(&in.config)
	}
	if in.key == nil {
		in.key = PeerIP()
	}
	if in.logger == nil {
		in.logger = slog.Default()
	}
	return in
}

func newRateInterceptor(l *core.Limiter, opts []Option) *rateInterceptor {
	if l == nil {
		panic("grpc: nil *core.Limiter")
	}
	in := &rateInterceptor{interceptor: newInterceptor(opts), def: l}
	in.unchecked = checkMethods(in.methods)
	in.fields = map[*core.Limiter]*nethttp.Fields{l: nethttp.NewFields(l.Limit(), l.Name(), in.style)}
	in.checkAlso(l)
	for _, ml := range in.methods {
		in.checkAlso(ml)
		if in.fields[ml] == nil {
			in.fields[ml] = nethttp.NewFields(ml.Limit(), ml.Name(), in.style)
		}
	}
	return in
}

// keyOf returns the key of a call to fullMethod, or skip for a call
// WithSkip exempts, or the status error that refuses it (nil in dry-run
// mode, with skip then true too); policy names the limit that would have
// decided it, for the observer.
func (in *interceptor) keyOf(ctx context.Context, fullMethod string, policy core.Result) (key string, skip bool, err error) {
	if in.skip != nil && in.skip(ctx, fullMethod) {
		return "", true, nil
	}
	key, err = in.key(ctx, fullMethod)
	switch {
	case err != nil:
		err = &keyError{err}
	case key == "":
		err = &keyError{errEmptyKey}
	default:
		return key, false, nil
	}
	err = in.fail(ctx, fullMethod, policy, err)
	return "", err == nil, err
}

// decide decides a call to fullMethod when it opens. It returns the header
// metadata to send (nil for none) and the status error refusing the call,
// nil to let it go on.
func (in *rateInterceptor) decide(ctx context.Context, fullMethod string) (metadata.MD, error) {
	if in.unchecked != nil {
		in.checkLog.Do(in.logUnchecked)
	}
	lim := in.def
	if l := in.methods[fullMethod]; l != nil {
		lim = l
	}
	policy := core.Result{Limit: lim.Limit(), Name: lim.Name()}
	key, skip, err := in.keyOf(ctx, fullMethod, policy)
	if skip || err != nil {
		return nil, err
	}
	var checks []core.Check // WithAlso's, after the interceptor's own
	if in.also != nil {
		if checks, err = in.alsoKeys(ctx, fullMethod); checks == nil {
			return nil, err
		}
	}
	n := 1
	if in.cost != nil {
		n = in.cost(ctx, fullMethod)
	}
	var res core.Result
	if checks != nil {
		res, err = allowAll(ctx, checks, lim, key, n)
	} else {
		res, err = lim.AllowN(ctx, key, n)
	}
	if err != nil {
		return nil, in.fail(ctx, fullMethod, policy, err)
	}
	if in.observe != nil {
		in.observe(ctx, fullMethod, res, nil, in.dryRun)
	}
	md := in.metadata(in.fields[lim], res)
	if res.Allowed || in.dryRun {
		return md, nil
	}
	return md, refusal(res)
}

// fail handles a call that could not be decided: err wraps ErrKey for a
// key error, else it is AllowN's; policy names the limit that would have
// decided it.
func (in *interceptor) fail(ctx context.Context, fullMethod string, policy core.Result, err error) error {
	if in.observe != nil {
		in.observe(ctx, fullMethod, policy, err, in.dryRun)
	}
	in.logFailure(err)
	if in.dryRun {
		return nil
	}
	return failure(err)
}

// metadata returns the rate-limit fields of res as metadata, formatted
// by f (the same values as an HTTP response's), or nil for none.
func (in *interceptor) metadata(f *nethttp.Fields, res core.Result) metadata.MD {
	if in.style == HeadersNone || res.Degraded {
		return nil
	}
	h := make(http.Header, 4)
	f.Set(h, res)
	md := make(metadata.MD, len(h))
	for k, v := range h {
		name, ok := metadataNames[k]
		if !ok {
			name = strings.ToLower(k)
		}
		md[name] = v
	}
	return md
}

// metadataNames maps the canonical field names nethttp sets to metadata
// names, which are lower case, so a call does not lower-case them again.
var metadataNames = map[string]string{
	"Ratelimit-Limit":       "ratelimit-limit",
	"Ratelimit-Remaining":   "ratelimit-remaining",
	"Ratelimit-Reset":       "ratelimit-reset",
	"Ratelimit-Policy":      "ratelimit-policy",
	"Ratelimit":             "ratelimit",
	"X-Ratelimit-Limit":     "x-ratelimit-limit",
	"X-Ratelimit-Remaining": "x-ratelimit-remaining",
	"X-Ratelimit-Reset":     "x-ratelimit-reset",
}

// epoch anchors the monotonic clock of failure logs.
var epoch = time.Now()

// logInterval is the least time between two failure log lines.
const logInterval = 10 * time.Second

// logFailure logs at most one line per logInterval about calls that could
// not be rate limited, as nethttp does for requests.
func (in *interceptor) logFailure(err error) {
	n, due := in.failures.Count(int64(time.Since(epoch)), int64(logInterval))
	if !due {
		return
	}
	kind := "key"
	if !errors.Is(err, ErrKey) {
		kind = "cost"
	}
	in.logger.Warn("ratelimit: gRPC calls could not be rate limited",
		"kind", kind, "count", n, "error", loggable(err))
}

// loggable is the text logged for err, which holds no client input: a
// key error is named by the keyfuncs or metadata error it matches, or is
// the server's own (no peer, an empty key), else by its type only, since
// a KeyFunc of the user's may put what the client sent in its text. A
// cost error is core's own text.
func loggable(err error) string {
	var ae *alsoError
	if errors.As(err, &ae) {
		return "grpc: WithAlso: the call's checks cannot be decided together (core.AllowAll: limiters on different stores, or one key under two limits of one Name)"
	}
	var ke *keyError
	if !errors.As(err, &ke) {
		return err.Error()
	}
	const prefix = "grpc: no rate-limit key: "
	var me *metadataError
	if errors.As(ke.err, &me) {
		return prefix + me.Error()
	}
	for _, s := range append([]error{errEmptyKey, ErrNoPeer, keyfuncs.ErrInvalidAddr}, clientErrors...) {
		if errors.Is(ke.err, s) {
			return prefix + s.Error()
		}
	}
	return prefix + "the key function failed (" + fmt.Sprintf("%T", ke.err) + "; its text is not logged: it may carry what the client sent)"
}

func (in *rateInterceptor) logUnchecked() {
	in.logger.Warn("ratelimit: WithMethods names services the protobuf registry does not know, so their methods could not be checked: a misspelt name never matches a call",
		"services", in.unchecked)
}
