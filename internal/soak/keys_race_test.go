//go:build race

package soak_test

// attackKeys is how many unique keys the cardinality attacks send: fewer
// under the race detector, which makes each decision several times slower.
func attackKeys() int { return 250_000 }
