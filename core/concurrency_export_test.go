package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// AcquireWithID is Acquire with the lease id chosen by the test, to send
// the same acquire twice as go-redis does when a reply is lost.
func AcquireWithID(c *Concurrency, ctx context.Context, key, id string) (*Lease, Result, error) {
	return c.acquire(ctx, key, id)
}

// ForgeLease returns a lease of key with id that Acquire never granted.
func ForgeLease(c *Concurrency, key, id string) *Lease {
	return &Lease{c: c, subj: c.store.subject(key), id: id}
}

// LeaseID returns l's id.
func LeaseID(l *Lease) string { return l.id }

// LeaseKey returns the Redis key of key's leases under name.
func LeaseKey(s *RedisStore, name, key string) string {
	return s.t.LeaseKey(bucket.HashSubject(key), name)
}

// RenewNow runs one renewal round of every kept lease, however recently
// renewed.
func RenewNow(c *Concurrency) { c.renew(0) }

// RenewOnce renews l alone, kept or not, and reports whether it still
// existed.
func RenewOnce(c *Concurrency, l *Lease) (bool, error) {
	lc := leaseCall{op: leaseRenew, deadline: time.Now().Add(time.Second), name: c.name, lease: c.lease, held: []*Lease{l}, renewed: make([]renewal, 1)}
	_, err := c.store.lease(context.Background(), lc)
	return lc.renewed[0] == renewed, err
}

// Kept reports how many leases c renews in the background.
func Kept(c *Concurrency) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.kept)
}

// Crash makes c stop renewing its leases without releasing them, as an
// instance that died would.
func Crash(c *Concurrency) {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.kept)
}

// AcquireWithRateHash is the SHA1 of the script deciding a slot and a
// rate limit's token together.
var AcquireWithRateHash = transport.AcquireWithRate.Hash()

// LoadAcquireWithRate loads that script on c (a node).
func LoadAcquireWithRate(ctx context.Context, c redis.Scripter) error {
	return transport.AcquireWithRate.Load(ctx, c).Err()
}
