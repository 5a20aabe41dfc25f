//go:build race

package echo_test

// raceEnabled skips allocation guards: under the race detector sync.Pool
// drops items at random, so the routers' pooled contexts are reallocated.
const raceEnabled = true
