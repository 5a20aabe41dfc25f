package transport

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// LiveSubj is the subject of the live sets (LiveKey): a leading '~' is
// reserved for bucket.HashSubject's digests, and no digest reads "~live", so no
// bucket or lease shares its slot by accident of a user's key.
const LiveSubj = "~live"

// LiveKey lays out the key of the live set of the instances deciding
// under policy name: <prefix>{~live}:<name>{live}. No policy name holds
// braces, so no bucket or lease set has this key.
func (s *Store) LiveKey(name string) string {
	return s.prefix + "{" + LiveSubj + "}:" + name + "{live}"
}

// Live is a heartbeat: by deadline, in one bounded call, it stamps this
// store (its random id: an app instance) in name's live set with the
// Redis server's time, drops the members not stamped within ttl, and
// returns how many remain (this one included). A re-sent call only
// stamps again: it is idempotent.
func (s *Store) Live(ctx context.Context, deadline time.Time, bound int64, name string, ttl time.Duration) (int, error) {
	var n int64
	err := s.leaseCall(ctx, deadline, bound, LiveSubj, func(ctx context.Context) (err error) {
		n, err = liveSet.Run(ctx, s.client, []string{s.LiveKey(name)}, s.idBase, strconv.FormatInt(ttl.Microseconds(), 10)).Int64()
		return err
	})
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, bucket.BadReply
	}
	return int(n), nil
}

// liveSet stamps ARGV[1] in the sorted set KEYS[1] with the server's time
// in µs, drops the members older than ARGV[2] µs, and returns the set's
// size. The key expires when its newest member would be dropped. Scores
// are integers below 2^53, formatted with %.0f (tostring keeps 14 digits).
var liveSet = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%.0f', now - ttl))
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(ttl / 1000)))
return redis.call('ZCARD', KEYS[1])
`)
