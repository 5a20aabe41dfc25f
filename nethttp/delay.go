package nethttp

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// WithDelay shapes instead of refusing: a request over the limit whose
// tokens will exist within max is booked (core.Limiter.ReserveN, in the
// order requests reach the store, across every instance) and waits its
// exact delay, then goes on to the handler, with header fields that
// describe the bucket after the wait; one that would wait longer is
// refused as without WithDelay (429, Retry-After). At most 1024 requests
// of one middleware wait at once, and 64 of one key; one more is refused
// at once with that same 429: it is over its key's limit, and the header
// fields say when to come back. A client that goes away while it waits
// hands its booking to the request of its key and cost waiting on this
// instance with the latest turn, whose own booking is cancelled
// (core.Reservation.Cancel): the latest, which no later booking counts on
// unless another instance booked since, so it is given back in full. On
// a key that several instances shape, a client that books and hangs up
// may still delay those behind it (see docs/waiting.md: what shaping a
// shared key costs). max must be positive and at
// most the MaxWait (core.Config) of every limiter the middleware knows at
// construction (its default and WithRoutes'): construction panics
// otherwise; a limiter from WithLimiterFunc books at most its own
// MaxWait. Default: no request waits. It does not combine with
// WithDryRun or WithAlso (construction panics).
func WithDelay(max time.Duration) Option {
	if max <= 0 {
		panic(fmt.Sprintf("nethttp: WithDelay(%v): the wait must be positive", max))
	}
	return func(c *config) { c.delay, c.room = max, new(room) }
}

// checkDelay panics when WithDelay's wait exceeds the MaxWait of one of
// the limiters the Gate knows (l, and limiters), or comes with WithDryRun
// or WithAlso.
func (c *config) checkDelay(limiters ...*core.Limiter) {
	if c.delay == 0 {
		return
	}
	if c.dryRun {
		panic("nethttp: WithDelay does not combine with WithDryRun: a dry run must not hold requests")
	}
	if c.also != nil {
		panic("nethttp: WithDelay does not combine with WithAlso: a booking holds one key's tokens, not several")
	}
	for _, l := range limiters {
		if most := l.MaxWait(); c.delay > most {
			panic(fmt.Sprintf("nethttp: WithDelay(%v) exceeds the MaxWait (%v) of limiter %q: raise core.Config.MaxWait", c.delay, most, l.Name()))
		}
	}
}

// The waiting room's bounds: WithDelay holds at most maxParked requests
// of one Gate at once, and maxParkedKey of one key (limiter and key), so
// that no key fills the room.
const (
	maxParked    = 1024
	maxParkedKey = 64
)

// room is where WithDelay's requests wait, one line per key.
type room struct {
	mu    sync.Mutex
	total int // requests in the room: booking or waiting
	lines map[roomKey]*line

	// leaving orders the clients that left: each one's swap and Cancel
	// end before the next one's swap, so that the booking cancelled is
	// still the latest when the store gets it (leave).
	leaving sync.Mutex
}

type roomKey struct {
	lim *core.Limiter
	key string
}

// line is one key's requests in the room: entered counts those booking
// or waiting, waits those booked and waiting for their turn.
type line struct {
	entered int
	waits   []*waiter
}

// waiter is a request waiting for its turn under a booking. A swap may
// give it an earlier booking (and turn): moved says so.
type waiter struct {
	rsv   *core.Reservation
	n     int
	at    time.Time // rsv's turn
	moved chan struct{}
}

// enter admits a request of k to the room, or reports false when the
// room or k's line is full.
func (rm *room) enter(k roomKey) bool {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	ln := rm.lines[k]
	if rm.total >= maxParked || ln != nil && ln.entered >= maxParkedKey {
		return false
	}
	if ln == nil {
		if rm.lines == nil {
			rm.lines = make(map[roomKey]*line)
		}
		ln = &line{}
		rm.lines[k] = ln
	}
	ln.entered++
	rm.total++
	return true
}

// park puts w, booked, in k's line.
func (rm *room) park(k roomKey, w *waiter) {
	rm.mu.Lock()
	ln := rm.lines[k]
	ln.waits = append(ln.waits, w)
	rm.mu.Unlock()
}

// exit takes a request of k out of the room: w (nil when it never
// waited) was served, or its client left (gone). A waiter whose client
// left hands its booking to the request of its line with the latest
// turn, of the same cost, and that request's own booking is the one
// cancelled: the latest of this instance's bookings, which no later
// booking counts on unless another instance booked since, so the store
// gets it back in full (Cancel gives back only what no later booking
// counted on). A client that books and hangs up then costs the others on
// its key nothing, in whatever order such clients leave. exit returns
// the booking to cancel (nil: none).
func (rm *room) exit(k roomKey, w *waiter, gone bool) *core.Reservation {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	ln := rm.lines[k]
	rm.total--
	if ln.entered--; ln.entered == 0 {
		delete(rm.lines, k)
	}
	if w == nil {
		return nil
	}
	var last *waiter
	for i, o := range ln.waits {
		if o == w {
			ln.waits = append(ln.waits[:i], ln.waits[i+1:]...)
			break
		}
	}
	if !gone {
		return nil
	}
	for _, o := range ln.waits {
		if o.n == w.n && o.at.After(w.at) && (last == nil || o.at.After(last.at)) {
			last = o
		}
	}
	if last == nil {
		return w.rsv
	}
	cancel := last.rsv
	last.rsv, last.at = w.rsv, w.at
	select {
	case last.moved <- struct{}{}:
	default:
	}
	return cancel
}

// leave takes w, whose client left, out of k's line and cancels the
// booking exit returns, one leaver at a time.
func (rm *room) leave(ctx context.Context, k roomKey, w *waiter) {
	rm.leaving.Lock()
	defer rm.leaving.Unlock()
	_ = rm.exit(k, w, true).Cancel(ctx)
}

// turn returns w's turn, which a swap may have moved.
func (rm *room) turn(w *waiter) time.Time {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return w.at
}

// shape turns denied, a refusal of r's request (c.n tokens of c.key under
// c.lim) that would be served within WithDelay's wait, into a booking and
// waits for it. It returns the Result to send: the booking's, allowed,
// after the wait; or a refusal (denied) when the room or the key's line
// is full, the booking could not be made (others booked first), or the
// client went away.
func (g *Gate) shape(ctx context.Context, r *http.Request, c charge, denied core.Result) core.Result {
	k := roomKey{c.lim, c.key}
	if !g.room.enter(k) {
		return denied
	}
	// Booked at most WithDelay's wait ahead: ReserveN books only before
	// its context's deadline.
	within, cancel := context.WithTimeout(ctx, g.delay)
	rsv, err := c.lim.ReserveN(within, c.key, c.n)
	cancel()
	if err != nil {
		g.room.exit(k, nil, false)
		return denied
	}
	res := rsv.Result()
	d := rsv.Delay()
	if !rsv.OK() || res.Degraded || d == 0 {
		g.room.exit(k, nil, false)
		return res
	}
	full := time.Now().Add(res.ResetAfter)
	w := &waiter{rsv: rsv, n: c.n, at: time.Now().Add(d), moved: make(chan struct{}, 1)}
	g.room.park(k, w)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			g.room.exit(k, w, false)
			res.ResetAfter = max(0, time.Until(full))
			return res
		case <-w.moved:
			t.Reset(time.Until(g.room.turn(w)))
		case <-r.Context().Done():
			g.room.leave(ctx, k, w)
			return denied
		}
	}
}
