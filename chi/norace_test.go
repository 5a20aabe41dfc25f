//go:build !race

package chi_test

const raceEnabled = false
