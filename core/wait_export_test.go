package core

import "time"

// Booked returns the delay the store answered for r: Delay counted from
// the answer, not from now.
func (r *Reservation) Booked() time.Duration { return r.delay }
