package bucket

// ticks are the time steps a policy may count in, finest first: a limit
// counts in the finest one that divides its period and keeps every scaled
// number below 2^53 (a per-day limit of 123457 needs milliseconds).
var ticks = [...]int64{1, 1000, 1000000}

// Tick returns the µs per time step a limit of rate tokens every period
// µs, holding capacity tokens, counts in (see ticks), or 0 when none
// keeps it exact. rate and period are > 0.
func Tick(rate, period, capacity int64) int64 {
	for _, t := range ticks {
		if period%t != 0 {
			break
		}
		g := gcd(rate, period/t)
		unit, refill := period/t/g, rate/g
		if capacity <= (MaxExact-refill)/unit && CeilDiv(capacity*unit, refill) < MaxExact/t {
			return t
		}
	}
	return 0
}

// PolicyOf returns the limit of rate tokens every period µs, holding
// capacity tokens, as the policy named name, built once (see NewPolicy):
// in units of 1/Unit token, so that Refill per Tick is exact. Its Tick
// must not be 0.
func PolicyOf(name string, rate, period, capacity int64) Policy {
	tick := Tick(rate, period, capacity)
	periodTicks := period / tick
	g := gcd(rate, periodTicks)
	unit := periodTicks / g
	return NewPolicy(name, capacity*unit, rate/g, unit, tick)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
