package core

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/transport"
)

// leasesLua defines acquire, the lease step shared by acquireLease and
// acquireWithRate: a sorted set per (Name, subject) whose members are
// lease ids and whose scores are the leases' deadlines in µs on the Redis
// server's clock (instance clocks never matter). In one atomic step it
// prunes the leases past their deadline, recognises its own re-sent call,
// and refuses when max leases are held, else adds the lease — when
// decide, if given, agrees: decide(1) takes the rate limit's tokens and
// says whether it did; decide(2) only peeks at them, for a call that adds
// no lease. The key expires with its last lease.
//
// Its reply: allowed (1 or 0), the leases held after the call, µs until
// the earliest lease ends when the slots refused (else 0: an upper bound
// on the wait for a slot, since a holder may release sooner), µs until
// the latest ends, and the leases pruned (past their deadline: their
// holders stopped renewing).
//
// Exactly once: go-redis re-sends a script whose reply was lost. A call
// that finds its own id already in the set has run before and was allowed
// (only an allowed call adds): it is answered allowed again, adding
// nothing, and its tokens answer from their replay record.
//
// Scores are integers below 2^53 and are formatted with %.0f, never
// tostring, which keeps 14 digits.
const leasesLua = `
local ceil, format = math.ceil, string.format
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function acquire(key, id, max, lease, decide)
  local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%.0f', now))
  local allowed, full = 1, false
  if redis.call('ZSCORE', key, id) then
    if decide then decide(2) end
  elseif redis.call('ZCARD', key) >= max then
    allowed, full = 0, true
    if decide then decide(2) end
  elseif decide and not decide(1) then
    allowed = 0
  else
    redis.call('ZADD', key, format('%.0f', now + lease), id)
    local ms = ceil(lease / 1000)
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, format('%d', ms)) end
  end
  local held = redis.call('ZCARD', key)
  local retry, reset = 0, 0
  if held > 0 then
    reset = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) - now
    if full then retry = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) - now end
  end
  return {allowed, held, retry, reset, pruned}
end
`

// acquireLease takes one of a key's slots (leasesLua's acquire). KEYS[1]
// is the set; ARGV the lease id, Max and the lease in µs.
var acquireLease = redis.NewScript(leasesLua + `
return acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
`)

// acquireWithRate takes a slot and a token of the rate limit of the same
// subject, all or nothing: leasesLua's acquire with the token bucket
// (transport.TokenBucketsLua, run as a function, the very arithmetic of every rate
// decision) as its decide. A refused slot takes no token (the bucket is
// only peeked at) and refused tokens add no lease.
//
// KEYS[1] is the lease set, then tokenBuckets' keys (the buckets, then
// the call's replay record); ARGV the lease id, Max and the lease in µs,
// then tokenBuckets' arguments for one request. The reply is acquire's,
// then tokenBuckets' reply for the request. A re-sent call is answered
// once more from the replay record that its first run wrote, taking
// nothing again.
var acquireWithRate = redis.NewScript(leasesLua + acquireWithRateMain)

const acquireWithRateMain = `
local function buckets(KEYS, ARGV)
` + transport.MgetLua + transport.TokenBucketsLua + `
end
local bk, ba = {}, {}
for i = 2, #KEYS do bk[i - 1] = KEYS[i] end
for i = 4, #ARGV do ba[i - 3] = ARGV[i] end
local opAt = 5 + tonumber(ba[3])
local reply
local function decide(op)
  ba[opAt] = op
  reply = buckets(bk, ba)
  return string.sub(reply, 1, 2) == '1,'
end
local out = acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), decide)
out[6] = reply
return out
`

// renewLeases extends leases that still exist to a Lease from now, on the
// server's clock, and never brings one back: a lease already past its
// deadline is removed, not renewed, even when no acquire has pruned it
// yet. KEYS are the leases' sets (a set may repeat), ARGV[1] the lease in
// µs, ARGV[1+i] the id of the lease in KEYS[i]. The reply has, per lease,
// 1 (renewed), 0 (gone: released, or pruned already) or 2 (expired, and
// pruned now).
var renewLeases = redis.NewScript(`
local ceil, format = math.ceil, string.format
local lease = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ms = ceil(lease / 1000)
local out = {}
for i, key in ipairs(KEYS) do
  local id = ARGV[i + 1]
  local s = redis.call('ZSCORE', key, id)
  out[i] = 0
  if s then
    if tonumber(s) > now then
      redis.call('ZADD', key, 'XX', format('%.0f', now + lease), id)
      if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, format('%d', ms)) end
      out[i] = 1
    else
      redis.call('ZREM', key, id)
      out[i] = 2
    end
  end
end
return out
`)
