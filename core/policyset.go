package core

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// policySet is what one decision is made under: a limit (Config.Limit, or
// AllowLimit's), then Config.Extra, in the integer form the stores take.
// It is built once and never changed, so decisions share it.
type policySet struct {
	limits   []Limit // index-aligned with policies
	policies []bucket.Policy
	minCap   int        // the smallest burst: a cost above it is never served
	local    *policySet // FailLocal's shares (limits / Instances); nil otherwise
	divisor  int        // of a set of shares: the instances it divides by

	view   atomic.Pointer[Limiter]   // the limiter deciding under this set (Limiter.With), made once
	shares atomic.Pointer[policySet] // FailLocal's shares for a learned count other than local's
}

// name is the set's policy name: its first policy's.
func (s *policySet) name() string { return s.policies[0].Name }

// newPolicySet validates named (the main limit first) and builds its set;
// instances > 0 adds FailLocal's shares.
func newPolicySet(named []NamedLimit, instances int) (*policySet, error) {
	ps, err := policies(named...)
	if err != nil {
		return nil, err
	}
	s := &policySet{policies: ps, minCap: int(^uint(0) >> 1)}
	for _, nl := range named {
		if err := nl.Limit.Validate(); err != nil {
			return nil, err
		}
		c := nl.Limit.Capacity()
		s.limits = append(s.limits, nl.Limit)
		s.minCap = min(s.minCap, c)
	}
	if instances > 0 {
		if s.local, err = s.sharesFor(instances); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// sharesFor returns the set of s's limits divided by instances.
func (s *policySet) sharesFor(instances int) (*policySet, error) {
	local := &policySet{minCap: int(^uint(0) >> 1), divisor: instances}
	for i, lim := range s.limits {
		ll, err := localLimit(lim, instances)
		if err != nil {
			return nil, err
		}
		local.limits = append(local.limits, ll)
		local.policies = append(local.policies, ll.policy(s.policies[i].Name))
		local.minCap = min(local.minCap, ll.Capacity())
	}
	return local, nil
}

// share returns FailLocal's shares of s for the instances c counts now:
// local, or for a learned count another set, made once per count. A
// count no share can hold (its period past what a limit may have) keeps
// the last shares made.
func (s *policySet) share(c *instanceCount) *policySet {
	n := c.get()
	if !c.learn || n == s.local.divisor {
		return s.local
	}
	last := s.shares.Load()
	if last != nil && last.divisor == n {
		return last
	}
	sh, err := s.sharesFor(n)
	if err != nil {
		return cmp.Or(last, s.local)
	}
	s.shares.Store(sh)
	return sh
}

// limitSets caches the policy sets of AllowLimit's limits (and Under's
// names and limits), so a limit read per request costs its arithmetic
// once. Memory is bounded: past maxLimitSets entries the cache starts
// afresh (the limits in use come back at once).
type limitSets struct {
	extra     []NamedLimit // Config.Extra, decided with every limit
	name      string       // the limiter's Name: every limit's policy name but Under's
	instances int          // FailLocal's Config.Instances; 0 otherwise
	mu        sync.RWMutex
	m         map[namedLimit]*policySet
}

// namedLimit keys limitSets: a limit under a policy name.
type namedLimit struct {
	name string
	lim  Limit
}

// maxLimitSets bounds a limiter's cached per-request limits.
const maxLimitSets = 1024

// get returns lim's policy set, or why lim cannot be decided.
func (c *limitSets) get(lim Limit) (*policySet, error) { return c.named(c.name, lim) }

// named returns the policy set of lim under policy name (a valid one),
// or why lim cannot be decided.
func (c *limitSets) named(name string, lim Limit) (*policySet, error) {
	k := namedLimit{name, lim}
	c.mu.RLock()
	s, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	named := append([]NamedLimit{{Name: name, Limit: lim}}, c.extra...)
	s, err := newPolicySet(named, c.instances)
	if err != nil {
		return nil, fmt.Errorf("core: AllowLimit %v: %w", lim, wrapInvalidLimit(err))
	}
	c.mu.Lock()
	if len(c.m) >= maxLimitSets {
		clear(c.m)
	}
	if c.m == nil {
		c.m = make(map[namedLimit]*policySet)
	}
	c.m[k] = s
	c.mu.Unlock()
	return s, nil
}

// wrapInvalidLimit makes every reason a per-request limit is refused
// match ErrInvalidLimit: it is the limit that is wrong, not the Config.
func wrapInvalidLimit(err error) error {
	if errors.Is(err, ErrInvalidLimit) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
}
