// Package logline lets a log line through at most once per interval, with
// how many events it stands for: the one mechanism by which core (degraded
// decisions) and nethttp (requests that could not be limited) log trouble
// without flooding.
package logline

import "sync/atomic"

// Line is a log line allowed once per interval. Times and intervals are
// ns on the owner's monotonic clock, which never reads 0. The zero value
// is ready; safe for concurrent use.
type Line struct {
	last  atomic.Int64 // when the line was last let through; 0: never
	count atomic.Int64 // events not yet logged
}

// Count notes one event at now and reports whether the line is due, the
// last one having gone out at least every ago; when
// it is, n is the events it stands for (this one included) and exactly
// one caller gets it.
func (l *Line) Count(now, every int64) (n int64, due bool) {
	l.count.Add(1)
	if !l.Due(now, every) {
		return 0, false
	}
	return l.count.Swap(0), true
}

// Due reports whether the line may be logged at now, counting nothing,
// and if so claims it: exactly one caller wins.
func (l *Line) Due(now, every int64) bool {
	prev := l.last.Load()
	return (prev == 0 || now-prev >= every) && l.last.CompareAndSwap(prev, now)
}

// Flush returns the events not yet logged, and forgets them.
func (l *Line) Flush() int64 { return l.count.Swap(0) }
