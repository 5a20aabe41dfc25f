package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/ratelimit/core"
)

// Instrument names of in-flight limits (core.Concurrency), as those of
// observer.go.
const (
	nameHeld     = "ratelimit_inflight_held"  // up-down counter, unit {slot} (no suffix) → gauge ratelimit_inflight_held
	nameRenewals = "ratelimit_lease_renewals" // counter → ratelimit_lease_renewals_total
	nameExpiries = "ratelimit_lease_expiries" // counter → ratelimit_lease_expiries_total
)

// leaseInstruments are the instruments of in-flight limits.
type leaseInstruments struct {
	held     metric.Int64UpDownCounter
	renewals metric.Int64Counter
	expiries metric.Int64Counter
}

// newLeaseInstruments makes them from m with package metrics' help
// texts; the error is m's, which New wraps. Held is an up-down counter,
// not a gauge: each event is a change (+1, -1), and the exporter gives a
// non-monotonic sum the gauge type.
func newLeaseInstruments(m metric.Meter) (leaseInstruments, error) {
	var l leaseInstruments
	var err, e error
	l.held, e = m.Int64UpDownCounter(nameHeld, metric.WithUnit("{slot}"),
		metric.WithDescription("Slots of an in-flight limit held by this instance's requests (acquired, not yet released); sum over instances for the total."))
	err = errors.Join(err, e)
	l.renewals, e = m.Int64Counter(nameRenewals, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of an in-flight limit extended by this instance's renewals (requests running longer than Lease/6)."))
	err = errors.Join(err, e)
	l.expiries, e = m.Int64Counter(nameExpiries, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of an in-flight limit found past their deadline and removed by this instance's store calls: their holders, on any instance, stopped renewing without releasing."))
	return l, errors.Join(err, e)
}

// Leases implements core.LeaseObserver. An in-flight limit's three
// series appear, at zero, with its first lease event, as in package
// metrics; a Limiter's policy has none.
func (o *Observer) Leases(e core.LeaseEvent) {
	ctx := context.Background()
	p := o.policy(e.Policy)
	if !p.leasesSeen.Load() && p.leasesSeen.CompareAndSwap(false, true) {
		o.leases.held.Add(ctx, 0, p.leases...)
		o.leases.renewals.Add(ctx, 0, p.leases...)
		o.leases.expiries.Add(ctx, 0, p.leases...)
	}
	if e.Held != 0 {
		o.leases.held.Add(ctx, int64(e.Held), p.leases...)
	}
	if e.Renewed > 0 {
		o.leases.renewals.Add(ctx, int64(e.Renewed), p.leases...)
	}
	if e.Expired > 0 {
		o.leases.expiries.Add(ctx, int64(e.Expired), p.leases...)
	}
}
