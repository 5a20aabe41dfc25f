// Package httpconformance holds, in its tests, the HTTP conformance suite
// of DESIGN.md §7.3: one table of cases run through all five adapters
// (nethttp, chi, echo, echo/v5, gin) with httptest, asserting that every
// router sends the same status, header fields and body, byte for byte.
//
// It has no API; run it with
//
//	go test ./internal/httpconformance
package httpconformance
