package core

import (
	"fmt"
	"slices"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/policyname"
)

// With returns l deciding under lim instead of Config.Limit, in the same
// buckets (the same Name): a limit known only per request, such as a
// tenant's quota read from a database, reaches every verb the same way —
// With(lim).AllowN, .Peek, .Refund, .ReserveN, .WaitN, .Charge. What a
// key has spent carries over between limits (DESIGN §3, "Limits that
// change"). Config.Extra still applies: lim takes Config.Limit's place
// and is decided together with the Extra limits, all or nothing. Results
// report lim (or the binding Extra limit); with FailLocal the in-process
// bucket holds lim / Instances.
//
// The result shares everything else with l (store, breakers, denial
// cache, observer, MaxWait) and costs nothing to keep or to drop: the
// views of the limits in use are made once (at most 1024 distinct limits
// per limiter, as AllowLimit's), and With(Config.Limit) is l. A denial
// cached under one limit answers only requests under that limit. The
// error is ErrInvalidLimit for a limit New would refuse. A view is not a
// ConcurrencyConfig.Rate.
func (l *Limiter) With(lim Limit) (*Limiter, error) {
	base := l.base
	set, err := base.setFor(lim)
	if err != nil {
		return nil, err
	}
	if set == base.set {
		return base, nil
	}
	if v := set.view.Load(); v != nil && v.base == base {
		return v, nil
	}
	v := &Limiter{set: set, base: base}
	set.view.CompareAndSwap(nil, v)
	return v, nil
}

// Under is With(lim) in the buckets of policy name n rather than l's
// Name: for this module's own packages, as n's type is internal (package
// internal/policyname). Many policies are decided so through one
// limiter's guard — its store, breakers, bound, denial cache (whose
// entries are keyed by policy name, so names never answer for each
// other), observer (DecisionEvent.Policy is n) and log line — rather
// than a Limiter each; the Envoy service decides its configured rules
// so. Config.Extra applies as for With (its names must differ from n).
// The views are made once per name and limit, sharing With's bound of
// 1024 per limiter; n is not claimed in the store's book of names
// (DESIGN §2a): its caller chose it. The error is ErrInvalidConfig for a
// name New would refuse, ErrInvalidLimit for a limit it would.
func (l *Limiter) Under(n policyname.Name, lim Limit) (*Limiter, error) {
	base, name := l.base, n.String()
	if name == base.set.policies[0].Name {
		return base.With(lim)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: Under needs a policy name", ErrInvalidConfig)
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(base.set.policies[1:], func(p bucket.Policy) bool { return p.Name == name }) {
		return nil, fmt.Errorf("%w: policy name %q is also an Extra limit's", ErrInvalidConfig, name)
	}
	set, err := base.perLimit.named(name, lim)
	if err != nil {
		return nil, err
	}
	if v := set.view.Load(); v != nil && v.base == base {
		return v, nil
	}
	v := &Limiter{set: set, base: base}
	set.view.CompareAndSwap(nil, v)
	return v, nil
}
