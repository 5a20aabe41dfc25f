package nethttp

// WithClock is withClock for this package's tests.
var WithClock = withClock

// Parked returns how many requests wait in g's WithDelay room, booked.
func Parked(g *Gate) int {
	g.room.mu.Lock()
	defer g.room.mu.Unlock()
	n := 0
	for _, ln := range g.room.lines {
		n += len(ln.waits)
	}
	return n
}
