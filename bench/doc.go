// Package bench compares this library with other Go rate limiters, side by
// side, against one Redis and in memory.
//
// Every peer is built the way its README recommends and asked the same
// question through a [Worker]: may this key spend one token now? The
// measurements count what does not depend on the machine's mood (Redis
// commands and round trips per decision, allocations per decision, requests
// admitted over one key by many instances) next to what does (decisions per
// second), which is only ever compared within one run, interleaved.
//
// cmd/compare runs everything and prints Markdown; the Benchmark functions in
// bench_test.go expose the same matrix to go test -bench.
package bench
