package core

import (
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

	view atomic.Pointer[Limiter] // the limiter deciding under this set (Limiter.With), made once
}

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
		s.local = &policySet{minCap: int(^uint(0) >> 1)}
		for i, nl := range named {
			ll, err := localLimit(nl.Limit, instances)
			if err != nil {
				return nil, err
			}
			s.local.limits = append(s.local.limits, ll)
			s.local.policies = append(s.local.policies, ll.policy(ps[i].Name))
			s.local.minCap = min(s.local.minCap, ll.Capacity())
		}
	}
	return s, nil
}

// limitSets caches the policy sets of AllowLimit's limits, so a limit read
// per request costs its arithmetic once. Memory is bounded: past
// maxLimitSets entries the cache starts afresh (the limits in use come back at once).
type limitSets struct {
	extra     []NamedLimit // Config.Extra, decided with every limit
	name      string       // the limiter's Name: every limit's policy name
	instances int          // FailLocal's Config.Instances; 0 otherwise
	mu        sync.RWMutex
	m         map[Limit]*policySet
}

// maxLimitSets bounds a limiter's cached per-request limits.
const maxLimitSets = 1024

// get returns lim's policy set, or why lim cannot be decided.
func (c *limitSets) get(lim Limit) (*policySet, error) {
	c.mu.RLock()
	s, ok := c.m[lim]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	named := append([]NamedLimit{{Name: c.name, Limit: lim}}, c.extra...)
	s, err := newPolicySet(named, c.instances)
	if err != nil {
		return nil, fmt.Errorf("core: AllowLimit %v: %w", lim, wrapInvalidLimit(err))
	}
	c.mu.Lock()
	if len(c.m) >= maxLimitSets {
		clear(c.m)
	}
	if c.m == nil {
		c.m = make(map[Limit]*policySet)
	}
	c.m[lim] = s
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
