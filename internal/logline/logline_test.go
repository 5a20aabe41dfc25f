package logline

import (
	"sync"
	"testing"
)

func TestLineOncePerInterval(t *testing.T) {
	t.Parallel()
	var l Line
	steps := []struct {
		now   int64
		n     int64
		due   bool
		label string
	}{
		{1, 1, true, "first event"},
		{5, 0, false, "within the interval"},
		{10, 0, false, "one short"},
		{11, 3, true, "interval over: the three since the last line"},
		{12, 0, false, "just logged"},
	}
	for _, s := range steps {
		if n, due := l.Count(s.now, 10); n != s.n || due != s.due {
			t.Errorf("%s: Count(%d) = %d, %v; want %d, %v", s.label, s.now, n, due, s.n, s.due)
		}
	}
	if got := l.Flush(); got != 1 {
		t.Errorf("Flush = %d, want the 1 event not logged", got)
	}
	if got := l.Flush(); got != 0 {
		t.Errorf("second Flush = %d, want 0", got)
	}
}

func TestLineOneWinner(t *testing.T) {
	t.Parallel()
	var l Line
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wins, total int64
	for range 64 {
		wg.Go(func() {
			for range 100 {
				if n, due := l.Count(7, 1<<40); due {
					mu.Lock()
					wins++
					total += n
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d callers got the line, want 1", wins)
	}
	if got := total + l.Flush(); got != 6400 {
		t.Fatalf("events logged + not logged = %d, want 6400", got)
	}
}
