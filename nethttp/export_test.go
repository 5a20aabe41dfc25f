package nethttp

// WithClock is withClock for this package's tests.
var WithClock = withClock
