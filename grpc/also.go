package grpc

import (
	"context"
	"fmt"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/adapterkey"
)

// alsoError is core.AllowAll's error for a call's checks: limiters on
// different stores, or one bucket under two limits. Its text may quote a
// key: loggable leaves it out.
type alsoError struct{ err error }

func (e *alsoError) Error() string { return "grpc: WithAlso: " + e.err.Error() }
func (e *alsoError) Unwrap() error { return e.err }

// checkAlso panics when a WithAlso limiter decides on another store than
// l, a limiter the interceptor knows at construction.
func (c *config) checkAlso(l *core.Limiter) {
	for _, a := range c.also {
		if a.lim.Store() != l.Store() {
			panic(fmt.Sprintf("grpc: WithAlso: limiter %q uses another store than limiter %q: the checks of one call must share a store (core.AllowAll)", a.lim.Name(), l.Name()))
		}
	}
}

// alsoKeys returns the checks of a call to fullMethod: a first one for
// the interceptor's own (to be filled in), then one per WithAlso with its
// key. On a key error it returns nil and the status error refusing the
// call (nil in dry-run mode: the call goes on undecided).
func (in *rateInterceptor) alsoKeys(ctx context.Context, fullMethod string) ([]core.Check, error) {
	checks := make([]core.Check, 1, 1+len(in.also))
	for _, a := range in.also {
		key, err := a.key(ctx, fullMethod)
		switch {
		case err != nil:
			err = &keyError{err}
		case key == "":
			err = &keyError{errEmptyKey}
		default:
			checks = append(checks, core.Check{Limiter: a.lim, Key: key})
			continue
		}
		return nil, in.fail(ctx, fullMethod, core.Result{Limit: a.lim.Limit(), Name: a.lim.Name()}, err)
	}
	return checks, nil
}

// allowAll decides checks, whose first is the interceptor's own (lim, for
// key), each for n tokens, in one core.AllowAll, whose binding result
// lists every check's policies (the metadata lists them) and is Degraded
// when any check is.
func allowAll(ctx context.Context, checks []core.Check, lim *core.Limiter, key string, n int) (core.Result, error) {
	if err := adapterkey.Checks(checks, lim, key, n); err != nil {
		return core.Result{}, err
	}
	res, _, err := core.AllowAll(ctx, checks...)
	if err != nil {
		return core.Result{}, &alsoError{err}
	}
	return res, nil
}
