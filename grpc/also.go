package grpc

import (
	"context"

	"github.com/sluicehq/ratelimit/core"
)

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
// key), each for n tokens, in one core.AllowAll. It returns the binding
// result with every check's policies listed (the metadata lists them),
// and whether a check was degraded.
func allowAll(ctx context.Context, checks []core.Check, lim *core.Limiter, key string, n int) (core.Result, bool, error) {
	checks[0] = core.Check{Limiter: lim, Key: key}
	for i := range checks {
		checks[i].N = n
	}
	res, each, err := core.AllowAll(ctx, checks...)
	if err != nil {
		return core.Result{}, false, err
	}
	degraded := false
	ps := make([]core.PolicyResult, 0, len(each))
	for _, e := range each {
		degraded = degraded || e.Degraded
		if e.Policies != nil {
			ps = append(ps, e.Policies...)
			continue
		}
		ps = append(ps, core.PolicyResult{Name: e.Name, Limit: e.Limit, Remaining: e.Remaining, RetryAfter: e.RetryAfter, ResetAfter: e.ResetAfter})
	}
	res.Policies = ps
	return res, degraded || res.Degraded, nil
}
