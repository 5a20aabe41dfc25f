//go:build !race

package soak_test

// attackKeys is how many unique keys the cardinality attacks send.
func attackKeys() int { return 1_000_000 }
