// Package soak holds the library's end-to-end load, soak and attack tests:
// traffic through the net/http middleware from several limiter instances
// against real Redis, with and without a stalled Redis in the middle,
// floods of unique keys against every store, and attacks on the limit by a
// client that controls only its connection or its deadline, through all
// four adapters. It has no API; its tests are bounded (each well under
// 20 s), and the load, soak and cardinality tests skip with -short.
//
// RELIABILITY.md quotes the figures these tests log:
//
//	go test -race -count=1 -v -run 'Soak|Cardinality|Hostile|Attack' ./internal/soak
package soak
