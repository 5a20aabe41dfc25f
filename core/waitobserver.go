package core

import "time"

// WaitObserver is an Observer that also sees bookings and charges
// (ReserveN, WaitN, Charge, and nethttp's Transport and WithDelay, which
// use them). Config.Observer is asked for it by type assertion; its
// events carry no key, as DecisionEvent's.
type WaitObserver interface {
	Observer
	Waited(e WaitEvent)
}

// WaitEvent describes one booking or charge to a WaitObserver.
type WaitEvent struct {
	Policy   string        // the limiter's policy name (Config.Name)
	Charge   bool          // a Charge; else a reservation
	Booked   bool          // a reservation was booked (OK); false: refused, nothing booked
	N        int           // the tokens booked or charged
	Delay    time.Duration // how long the booked reservation waits; 0 when it acts now
	Forgiven int           // a charge's tokens beyond the debt bound, forgiven
	Degraded bool          // the store could not decide; FailMode did
}

// observeWait tells Config.Observer about e if it is a WaitObserver.
// l is a base with an observer.
func (l *Limiter) observeWait(e WaitEvent) {
	if w, ok := l.observer.(WaitObserver); ok {
		e.Policy = l.Name()
		w.Waited(e)
	}
}
