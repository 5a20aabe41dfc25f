package bench

import (
	"testing"
	"time"
)

// TestHistogramBuckets: every latency falls in the bucket whose bounds hold
// it, buckets are contiguous, and none is wider than 1/8 of its lower end.
func TestHistogramBuckets(t *testing.T) {
	for i := 0; i < histBuckets-1; i++ {
		lo, hi := histLower(i), histLower(i+1)
		if hi <= lo {
			t.Fatalf("bucket %d: [%d, %d) µs is empty", i, lo, hi)
		}
		if i >= 8 && (hi-lo)*8 > lo {
			t.Fatalf("bucket %d: [%d, %d) µs is wider than 1/8 of %d", i, lo, hi, lo)
		}
		for _, us := range []uint64{lo, hi - 1} {
			if got := histIndex(us); got != i {
				t.Fatalf("%d µs in bucket %d; want %d, [%d, %d)", us, got, i, lo, hi)
			}
		}
	}
}

func TestHistogramQuantileAndOver(t *testing.T) {
	var h Histogram
	for range 98 {
		h.Add(30 * time.Millisecond)
	}
	h.Add(49 * time.Millisecond)
	h.Add(200 * time.Millisecond)
	if q := h.Quantile(0.5); q < 30*time.Millisecond || q > 30*time.Millisecond*9/8 {
		t.Errorf("median %v; want in [30ms, 33.75ms]", q)
	}
	if q := h.Quantile(0.99); q < 200*time.Millisecond || q > 225*time.Millisecond {
		t.Errorf("p99 %v; want in [200ms, 225ms]", q)
	}
	if n := h.Over(100 * time.Millisecond); n != 1 {
		t.Errorf("Over(100ms) = %d; want 1", n)
	}
	if n := h.Over(31 * time.Millisecond); n != 2 {
		t.Errorf("Over(31ms) = %d; want 2 (the 30ms ones are in a lower bucket)", n)
	}
}
