//go:build race

package core_test

// raceDetector: decisions run several times slower under the race
// detector, so tests that hold a real-time deadline give it more room.
const raceDetector = true
