package nethttp

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/adapterkey"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// WithAlso limits each request by l too, on the key that key gives (a
// tenant, or a constant "*" for a route's global ceiling), in the same
// core.AllowAll call as the middleware's own decision: all or nothing, so
// a request either check refuses takes nothing from either, and the whole
// costs one store round trip. Several WithAlso add several checks; every
// limiter must use the store of the middleware's (core.AllowAll's rule):
// construction panics when l's store is not that of the middleware's
// limiter or of a WithRoutes limiter; a WithLimiterFunc limiter on another
// store gets the ErrorHandler's 500.
//
// Every check takes the request's cost (WithCost); a cost some check's
// limiter could never allow is WithCost's bug, the ErrorHandler's 500, as
// without WithAlso. The own check is the middleware's as always
// (WithRoutes, WithLimiterFunc, WithLimitFunc choose it); a WithAlso
// check keeps l's limit. The header fields describe the binding result
// (the refusing check with the longest wait, else the one with the fewest
// tokens left for its burst): RateLimit-Limit, -Remaining and -Reset,
// X-RateLimit-* and Retry-After are its;
// RateLimit-Policy lists every check's policies (draft-06 one per quota,
// as the draft requires), and draft-11's RateLimit has an item for each.
// A decision any of whose checks the store could not make (Degraded)
// sends no rate-limit fields. The DenyHandler and the observer get the
// binding result with every check's policies in Result.Policies.
//
// A key function that fails is a key error as WithKey's is (400, or 500
// for an empty key), before anything is decided: nothing is taken.
// WithCountIf gives back what every check took. WithAlso applies to
// Middleware, each adapter's, NewGate and Gate.ServeKey (whose key
// replaces only WithKey's); it panics with WithDelay (a booking is one
// key's), and Concurrency and Transport panic when given it. It panics
// if l or key is nil.
func WithAlso(l *core.Limiter, key keyfuncs.KeyFunc) Option {
	mustNotBeNil(l == nil, "WithAlso")
	mustNotBeNil(key == nil, "WithAlso")
	return func(c *config) { c.also = append(c.also, alsoCheck{lim: l, key: key}) }
}

// checkAlso panics when a WithAlso limiter decides on another store than
// limiters, which the Gate knows at construction (its own and WithRoutes').
func (c *config) checkAlso(limiters ...*core.Limiter) {
	for _, a := range c.also {
		for _, l := range limiters {
			if a.lim.Store() != l.Store() {
				panic(fmt.Sprintf("nethttp: WithAlso: limiter %q uses another store than limiter %q: the checks of one request must share a store (core.AllowAll)", a.lim.Name(), l.Name()))
			}
		}
	}
}

// alsoCheck is one WithAlso.
type alsoCheck struct {
	lim *core.Limiter
	key keyfuncs.KeyFunc
}

// alsoError is core.AllowAll's error for a request's checks: limiters on
// different stores, or one bucket under two limits.
type alsoError struct{ err error }

func (e *alsoError) Error() string { return "nethttp: WithAlso: " + e.err.Error() }
func (e *alsoError) Unwrap() error { return e.err }

// loggable is e's text without what a client sent: AllowAll's error may
// quote a key.
func (e *alsoError) loggable() string {
	return "nethttp: WithAlso: the request's checks cannot be decided together (core.AllowAll: limiters on different stores, or one key under two limits of one Name)"
}

// alsoKeys returns the checks of r: a first one for the Gate's own (to
// be filled in), then one per WithAlso with its key, each of them
// WithAlso's limiter. A key error, or an empty key, is reported with the
// policy of its limiter.
func (g *Gate) alsoKeys(r *http.Request) ([]core.Check, core.Result, error) {
	checks := make([]core.Check, 1, 1+len(g.also))
	for _, a := range g.also {
		key, err := a.key(r)
		switch {
		case err != nil:
			return nil, policyOf(a.lim), &keyError{err}
		case key == "":
			return nil, policyOf(a.lim), errEmptyKey
		}
		checks = append(checks, core.Check{Limiter: a.lim, Key: key})
	}
	return checks, core.Result{}, nil
}

// allowAll decides checks, whose first is the Gate's own (lim, for key),
// each for n tokens, in one core.AllowAll, whose binding result lists
// every check's policies and is Degraded when any check is.
func (g *Gate) allowAll(ctx context.Context, checks []core.Check, lim *core.Limiter, key string, n int) (core.Result, error) {
	if err := adapterkey.Checks(checks, lim, key, n); err != nil {
		return core.Result{}, err
	}
	res, _, err := core.AllowAll(ctx, checks...)
	if err != nil {
		return core.Result{}, &alsoError{err}
	}
	return res, nil
}

// limiterHeaders formats the header values of lim's decisions: its
// configured limits, then with WithAlso those of every WithAlso limiter,
// as RateLimit-Policy lists them.
func (g *Gate) limiterHeaders(lim *core.Limiter) *policyHeaders {
	ph := limiterHeaders(lim)
	if g.also == nil {
		return ph
	}
	var ps []core.PolicyResult
	for _, l := range append([]*core.Limiter{lim}, g.alsoLimiters()...) {
		for _, nl := range l.Limits() {
			ps = append(ps, core.PolicyResult{Name: nl.Name, Limit: nl.Limit})
		}
	}
	ph.multi = newMultiHeaders(ps)
	return ph
}

func (g *Gate) alsoLimiters() []*core.Limiter {
	ls := make([]*core.Limiter, len(g.also))
	for i, a := range g.also {
		ls[i] = a.lim
	}
	return ls
}
