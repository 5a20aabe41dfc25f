package grpc

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/ratelimit/core"
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
// a WithMethods name cannot match.
func UnaryServerInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	in := newInterceptor(l, opts)
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
	in := newInterceptor(l, opts)
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

// interceptor is the behaviour both interceptors share, built once.
type interceptor struct {
	config
	def       *core.Limiter
	fields    map[*core.Limiter]*nethttp.Fields // each limiter's header values, formatted once
	unchecked []string                          // WithMethods services the registry does not know
	checkLog  sync.Once                         // logs unchecked at the first call

	// Calls that could not be rate limited since the last log line, and
	// when that line was written (monotonic ns since epoch).
	failures atomic.Int64
	lastLog  atomic.Int64
}

func newInterceptor(l *core.Limiter, opts []Option) *interceptor {
	if l == nil {
		panic("grpc: nil *core.Limiter")
	}
	in := &interceptor{def: l}
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
	in.unchecked = checkMethods(in.methods)
	in.fields = map[*core.Limiter]*nethttp.Fields{l: nethttp.NewFields(l.Limit(), l.Name(), in.style)}
	for _, ml := range in.methods {
		if in.fields[ml] == nil {
			in.fields[ml] = nethttp.NewFields(ml.Limit(), ml.Name(), in.style)
		}
	}
	return in
}

// decide decides a call to fullMethod when it opens. It returns the header
// metadata to send (nil for none) and the status error refusing the call,
// nil to let it go on.
func (in *interceptor) decide(ctx context.Context, fullMethod string) (metadata.MD, error) {
	if in.unchecked != nil {
		in.checkLog.Do(in.logUnchecked)
	}
	if in.skip != nil && in.skip(ctx, fullMethod) {
		return nil, nil
	}
	key, err := in.key(ctx, fullMethod)
	switch {
	case err != nil:
		return nil, in.fail(ctx, fullMethod, &keyError{err})
	case key == "":
		return nil, in.fail(ctx, fullMethod, &keyError{errEmptyKey})
	}
	lim := in.def
	if l := in.methods[fullMethod]; l != nil {
		lim = l
	}
	n := 1
	if in.cost != nil {
		n = in.cost(ctx, fullMethod)
	}
	res, err := lim.AllowN(ctx, key, n)
	if err != nil {
		return nil, in.fail(ctx, fullMethod, err)
	}
	if in.observe != nil {
		in.observe(ctx, fullMethod, res, nil, in.dryRun)
	}
	md := in.metadata(lim, res)
	if res.Allowed || in.dryRun {
		return md, nil
	}
	return md, refusal(res)
}

// fail handles a call that could not be decided: err wraps ErrKey for a
// key error, else it is AllowN's.
func (in *interceptor) fail(ctx context.Context, fullMethod string, err error) error {
	if in.observe != nil {
		in.observe(ctx, fullMethod, core.Result{}, err, in.dryRun)
	}
	in.logFailure(err)
	if in.dryRun {
		return nil
	}
	return failure(err)
}

// metadata returns the rate-limit fields of res, decided by lim, as
// metadata, formatted by nethttp (the same values as an HTTP response's),
// or nil for none.
func (in *interceptor) metadata(lim *core.Limiter, res core.Result) metadata.MD {
	if in.style == HeadersNone || res.Degraded {
		return nil
	}
	h := make(http.Header, 4)
	in.fields[lim].Set(h, res)
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
	n := in.failures.Add(1)
	now := int64(time.Since(epoch))
	last := in.lastLog.Load()
	if (last != 0 && now-last < int64(logInterval)) || !in.lastLog.CompareAndSwap(last, now) {
		return
	}
	in.failures.Add(-n)
	kind := "key"
	if !errors.Is(err, ErrKey) {
		kind = "cost"
	}
	in.logger.Warn("ratelimit: gRPC calls could not be rate limited",
		"kind", kind, "count", n, "error", err.Error())
}

func (in *interceptor) logUnchecked() {
	in.logger.Warn("ratelimit: WithMethods names services the protobuf registry does not know, so their methods could not be checked: a misspelt name never matches a call",
		"services", in.unchecked)
}
