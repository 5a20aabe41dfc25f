package core

// FailMode decides what a Limiter does when its store cannot decide (Redis
// down, stalled, timed out, or the circuit breaker open). It has no default:
// the zero value is "not chosen" and New refuses it, so every user writes
// the decision down.
type FailMode int

const (
	// FailOpen allows the request: for fairness limits on public APIs, where
	// an outage of the limiter must not become an outage of the API.
	FailOpen FailMode = iota + 1
	// FailClosed denies the request (HTTP 503 with Retry-After): for login
	// and brute-force protection, where an unlimited window is the risk.
	FailClosed
	// FailLocal decides with an in-process bucket holding the limit divided
	// by Config.Instances: approximately the shared limit while the store is
	// gone, without sharing anything.
	FailLocal
)

// String returns "open", "closed", "local" or "FailMode(n)".
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "FailMode(" + itoa(int(m)) + ")"
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
