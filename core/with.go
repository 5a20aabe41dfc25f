package core

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
