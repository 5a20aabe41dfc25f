package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// Limit is a token bucket: Rate tokens are added every Period, up to Burst
// tokens. A request costing n tokens is allowed when the bucket holds at
// least n; then n are taken.
//
// The zero value is not a usable limit; build one with PerSecond, PerMinute,
// PerHour or a literal. Limit is a small value type, safe to copy.
type Limit struct {
	Rate   int           // tokens added per Period; must be > 0
	Period time.Duration // a whole number of microseconds, > 0
	Burst  int           // bucket capacity; 0 means Rate
}

// PerSecond returns a limit of rate tokens per second with a burst of rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }

// PerMinute returns a limit of rate tokens per minute with a burst of rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }

// PerHour returns a limit of rate tokens per hour with a burst of rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// PerDay returns a limit of rate tokens per 24 hours with a burst of rate.
func PerDay(rate int) Limit { return Limit{Rate: rate, Period: 24 * time.Hour, Burst: rate} }

// WithBurst returns a copy of l whose bucket holds burst tokens.
func (l Limit) WithBurst(burst int) Limit {
	l.Burst = burst
	return l
}

// Capacity is the bucket size: Burst, or Rate when Burst is 0.
func (l Limit) Capacity() int {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// String names the limit, e.g. "3-per-1m0s", or "3-per-1m0s-burst-5" when the
// burst differs from the rate. It is the default policy name, so it stays
// ASCII: microseconds are written "us" ("1-per-500us"), not "µs".
func (l Limit) String() string {
	s := strconv.Itoa(l.Rate) + "-per-" + strings.Replace(l.Period.String(), "µs", "us", 1)
	if c := l.Capacity(); c != l.Rate {
		s += "-burst-" + strconv.Itoa(c)
	}
	return s
}

// Window is the time an empty bucket takes to fill: Capacity / (Rate/Period),
// rounded up to whole seconds. It is the w parameter of RateLimit-Policy.
// It is 0 for a limit New would refuse.
func (l Limit) Window() time.Duration {
	if l.validate() != nil {
		return 0
	}
	p := l.policy("")
	us := bucket.CeilDiv(p.Capacity, p.Refill) * p.Tick
	return time.Duration(bucket.CeilDiv(us, 1e6)) * time.Second
}

// maxHeaderInt is the largest integer an RFC 9651 structured field holds.
const maxHeaderInt = 999_999_999_999_999

// Validate reports whether New accepts l as Config.Limit (and AllowLimit
// and With as a per-request limit): nil, or an error matching
// ErrInvalidLimit that says what is wrong. It contacts no store.
func (l Limit) Validate() error {
	if err := l.validate(); err != nil {
		return err
	}
	if c := l.Capacity(); c > maxHeaderInt {
		return fmt.Errorf("%w: a burst of %d does not fit the RateLimit header fields (RFC 9651 integers have at most 15 digits)", ErrInvalidLimit, c)
	}
	return nil
}

// validate reports why l cannot be computed exactly, or nil; Validate
// adds the bound of the header fields.
func (l Limit) validate() error {
	switch {
	case l.Rate <= 0:
		return fmt.Errorf("%w: Rate is %d, must be > 0", ErrInvalidLimit, l.Rate)
	case l.Period <= 0:
		return fmt.Errorf("%w: Period is %v, must be > 0", ErrInvalidLimit, l.Period)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: Period %v is not a whole number of microseconds", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: Burst is %d, must be >= 0", ErrInvalidLimit, l.Burst)
	}
	if bucket.Tick(int64(l.Rate), l.Period.Microseconds(), int64(l.Capacity())) == 0 {
		return fmt.Errorf("%w: %v cannot be counted exactly below 2^53 in µs, ms or s; lower the burst or the rate", ErrInvalidLimit, l)
	}
	return nil
}

// policy returns l in the integer form stores compute with. l must be valid.
func (l Limit) policy(name string) bucket.Policy {
	return bucket.PolicyOf(name, int64(l.Rate), l.Period.Microseconds(), int64(l.Capacity()))
}

// NamedLimit is a limit with its policy name, for limiters that check
// several limits at once (Config.Extra).
type NamedLimit struct {
	Name  string // default Limit.String()
	Limit Limit
}

// policies validates limits and returns them in the integer form the
// stores take, in order. Names default to Limit.String() and must be
// distinct.
func policies(limits ...NamedLimit) ([]bucket.Policy, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: no limits", ErrInvalidLimit)
	}
	ps := make([]bucket.Policy, len(limits))
	for i, nl := range limits {
		if err := nl.Limit.validate(); err != nil {
			return nil, err
		}
		if nl.Name == "" {
			nl.Name = nl.Limit.String()
		}
		if err := validName(nl.Name); err != nil {
			return nil, err
		}
		for _, p := range ps[:i] {
			if p.Name == nl.Name {
				return nil, fmt.Errorf("%w: two limits named %q would share buckets", ErrInvalidConfig, nl.Name)
			}
		}
		ps[i] = nl.Limit.policy(nl.Name)
	}
	return ps, nil
}
