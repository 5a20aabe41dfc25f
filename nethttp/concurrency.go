package nethttp

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// Concurrency returns net/http middleware that lets at most c's Max
// requests per key run at once, across every instance sharing c's store:
// each request's key (WithKey, default the client IP) takes a slot before
// the handler runs and gives it back when the handler returns, panics or
// its client goes away. While the handler runs longer, the slot is
// renewed in the background (core.Lease.KeepAlive). When every slot is
// held the response is 429 Too Many Requests, saying so in its problem
// document ("too many requests in flight; retry in 1 second"), with
// Retry-After: 1 (a slot frees when a holder finishes, at any moment
// before the earliest lease ends, which is only an upper bound); 503 when
// the store is down and c is core.FailClosed. The header fields describe
// slots: RateLimit-Limit is Max, RateLimit-Remaining the slots left free,
// and no RateLimit-Policy that would read as a rate (draft-11's gives
// the quota unit, qu="concurrent-requests"; see NewConcurrencyFields).
//
// When c has a Rate (core.ConcurrencyConfig.Rate), each request takes a
// slot and a token together or neither, and the header fields are the
// Rate's, as its Middleware would set them; a refusal for lack of tokens
// is the Rate's (its fields, its wait, DefaultDenyHandler's "rate limit
// exceeded"), one by the slots alone the slots' as above. The
// DenyHandler, when WithDenyHandler gives one, gets the core.Result
// those describe, which names the limit that refused (Result.Name).
//
// The options are the Gate's: WithKey, WithSkip, WithDryRun (every
// request goes on; a refused one holds no slot), WithDenyHandler,
// WithErrorHandler, WithObserver, WithHeaders and WithLogger. Options
// about tokens or per-route limiters (WithCost, WithCountIf,
// WithLimiterFunc, WithLimitFunc, WithRoutes, WithServeMux, WithAlso,
// WithDelay: a slot is not booked ahead) do not apply to an in-flight limit: Concurrency panics when given one,
// as it does when c or an option is nil.
func Concurrency(c *core.Concurrency, opts ...Option) func(http.Handler) http.Handler {
	g := NewConcurrencyGate(c, opts...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lease, ok := g.Acquire(w, r)
			if !ok {
				return
			}
			defer lease.Release(r.Context())
			next.ServeHTTP(w, r)
		})
	}
}

// ConcurrencyGate is the HTTP behaviour of Concurrency, for adapters: key
// → slot → header fields → refusal, written once here. Build it once with
// NewConcurrencyGate and share it; it is safe for concurrent use.
type ConcurrencyGate struct {
	gate   Gate // the options, and the failure log
	c      *core.Concurrency
	fields *Fields
	// denySlots: no WithDenyHandler, so a refusal by slots says so.
	denySlots bool
}

// NewConcurrencyGate returns the gate of c with opts applied, then the
// defaults filled in. It panics as Concurrency does.
func NewConcurrencyGate(c *core.Concurrency, opts ...Option) *ConcurrencyGate {
	if c == nil {
		panic("nethttp: nil *core.Concurrency")
	}
	g := &ConcurrencyGate{c: c}
	cfg := &g.gate.config
	for _, o := range opts {
		if o == nil {
			panic("nethttp: nil Option")
		}
		o(cfg)
	}
	for name, set := range map[string]bool{
		"WithCost": cfg.cost != nil, "WithCountIf": cfg.countIf != nil, "WithLimiterFunc": cfg.pick != nil,
		"WithRoutes": cfg.routes != nil, "WithServeMux": cfg.mux != nil, "WithLimitFunc": cfg.limitOf != nil,
		"WithAlso": cfg.also != nil, "WithDelay": cfg.delay != 0,
	} {
		if set {
			panic("nethttp: Concurrency: " + name + " does not apply to an in-flight limit")
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.key == nil {
		cfg.key = keyfuncs.IP(keyfuncs.Logger(cfg.logger))
	}
	if cfg.deny == nil {
		cfg.deny, g.denySlots = DefaultDenyHandler, true
	}
	if cfg.onError == nil {
		cfg.onError = DefaultErrorHandler
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	g.fields = NewConcurrencyFields(c, cfg.style)
	return g
}

// Acquire takes a slot for r and reports whether the caller should go on
// to the next handler. When it returns false it has written the whole
// response (429, 503, 400 or 500, or the DenyHandler's or ErrorHandler's);
// when true it has only set header fields, and the caller runs the
// handler, then releases the lease — in a defer, so that a panic releases
// it too:
//
//	lease, ok := g.Acquire(w, r)
//	if !ok {
//		return
//	}
//	defer lease.Release(r.Context())
//
// The lease is nil when nothing is held (a skipped request, a dry-run
// refusal); Release on nil does nothing. The lease is kept alive while
// the handler runs (core.Lease.KeepAlive).
func (g *ConcurrencyGate) Acquire(w http.ResponseWriter, r *http.Request) (*core.Lease, bool) {
	cfg := &g.gate.config
	if g.gate.exempt(r) {
		return nil, true
	}
	key, err := cfg.key(r)
	if err != nil {
		return nil, g.gate.fail(w, r, g.policy(), &keyError{err})
	}
	if key == "" {
		return nil, g.gate.fail(w, r, g.policy(), errEmptyKey)
	}
	ctx := r.Context()
	if cfg.dryRun {
		ctx = core.WithDryRun(ctx) // metrics say "would deny", never "denied"
	}
	lease, res, err := g.c.Acquire(ctx, key)
	if err != nil {
		return nil, g.gate.fail(w, r, g.policy(), err)
	}
	if cfg.observe != nil {
		cfg.observe(r, res, nil, cfg.dryRun)
	}
	h := w.Header()
	if !res.Degraded && cfg.style != HeadersNone {
		g.fields.set(h, res, cfg.now)
	}
	if lease != nil {
		lease.KeepAlive()
		return lease, true
	}
	if cfg.dryRun {
		return nil, true
	}
	res, slots := g.fields.Refusal(res)
	setRetryAfter(h, &res)
	if slots && g.denySlots {
		denySlots(w, res)
	} else {
		cfg.deny(w, r, res)
	}
	return nil, false
}

// policy is the Result an observer gets with an error: the slots'
// policy name and limit, nothing decided.
func (g *ConcurrencyGate) policy() core.Result {
	return core.Result{Limit: g.c.Limit(), Name: g.c.Name()}
}

// rateOnly returns the Rate's part of an acquire's Result (res.Policies
// less the slots, listed last), with the Rate's wait when it refused.
func rateOnly(res core.Result) core.Result {
	n := len(res.Policies) - 1
	if n < 1 {
		return res
	}
	rate := res.Policies[:n]
	b := 0
	for i, p := range rate {
		if p.Name == res.Name {
			b = i
			break
		}
		if p.Remaining < rate[b].Remaining {
			b = i
		}
	}
	p := rate[b]
	hr := core.Result{Allowed: res.Allowed, Limit: p.Limit, Name: p.Name, Remaining: p.Remaining, RetryAfter: res.RetryAfter, ResetAfter: p.ResetAfter}
	if wait := maxRetry(rate); wait > 0 {
		hr.RetryAfter = wait // not the slots' when both refused
	}
	if n > 1 {
		hr.Policies = rate
	}
	return hr
}

// maxRetry is the longest RetryAfter of ps: 0 when each had its tokens.
func maxRetry(ps []core.PolicyResult) time.Duration {
	var d time.Duration
	for _, p := range ps {
		d = max(d, p.RetryAfter)
	}
	return d
}
