package core

import (
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// nameBook records the policy names of the live limiters on one store, so
// that two limiters share buckets only when both were given that Name on
// purpose (DESIGN §2a). A limiter is held weakly: one that was dropped
// never blocks a new one. RedisStore and MemoryStore have one; limiters on
// other stores are not checked.
type nameBook struct {
	mu   sync.Mutex
	used map[string][]nameUse
}

type nameUse struct {
	l        weak.Pointer[Limiter]
	defaults bool // the name was the default one, not chosen
}

// claim records l's policy names, or says which one another live limiter
// on the store already uses where either took it by default.
func (n *nameBook) claim(l *Limiter, policies []bucket.Policy, defaulted []bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.conflict(policies, defaulted); err != nil {
		// Limiters dropped but not yet collected still hold their names.
		n.mu.Unlock()
		runtime.GC()
		n.mu.Lock()
		if err = n.conflict(policies, defaulted); err != nil {
			return err
		}
	}
	if n.used == nil {
		n.used = make(map[string][]nameUse)
	}
	wp := weak.Make(l)
	for i, p := range policies {
		n.used[p.Name] = append(n.used[p.Name], nameUse{wp, defaulted[i]})
	}
	return nil
}

// conflict reports the first of policies whose name a live limiter uses
// where either side took it by default, dropping dead entries. n.mu is held.
func (n *nameBook) conflict(policies []bucket.Policy, defaulted []bool) error {
	for i, p := range policies {
		live := n.used[p.Name][:0]
		for _, u := range n.used[p.Name] {
			if u.l.Value() != nil {
				live = append(live, u)
			}
		}
		if len(live) == 0 {
			delete(n.used, p.Name)
			continue
		}
		n.used[p.Name] = live
		for _, u := range live {
			if u.defaults || defaulted[i] {
				return fmt.Errorf("%w: another limiter on this store already uses the policy name %q, so the two would share buckets; "+
					"give each limiter its own Config.Name (or NamedLimit.Name), or the same Name on both to share on purpose", ErrInvalidConfig, p.Name)
			}
		}
	}
	return nil
}
