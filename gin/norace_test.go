//go:build !race

package gin_test

const raceEnabled = false
