package core

import "github.com/redis/go-redis/v9"

// acquireLease takes one of a key's slots: a sorted set per (Name,
// subject) whose members are lease ids and whose scores are the leases'
// deadlines in µs on the Redis server's clock (instance clocks never
// matter). In one atomic step it prunes the leases past their deadline,
// recognises its own re-sent call, and denies when Max leases are held or
// else adds the lease. The key expires with its last lease.
//
// KEYS[1] is the set; ARGV the lease id, Max and the lease in µs. The
// reply: allowed (1 or 0), the leases held after the call, µs until the
// earliest lease ends (0 when allowed: an upper bound on the wait for a
// slot, since a holder may release sooner) and µs until the latest ends.
//
// Exactly once: go-redis re-sends a script whose reply was lost. A call
// that finds its own id already in the set has run before and was allowed
// (only an allowed call adds): it is answered allowed again, adding
// nothing.
//
// Scores are integers below 2^53 and are formatted with %.0f, never
// tostring, which keeps 14 digits.
var acquireLease = redis.NewScript(`
local ceil, format = math.ceil, string.format
local key, id = KEYS[1], ARGV[1]
local max, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%.0f', now))
local allowed = 1
if not redis.call('ZSCORE', key, id) then
  if redis.call('ZCARD', key) >= max then
    allowed = 0
  else
    redis.call('ZADD', key, format('%.0f', now + lease), id)
    local ms = ceil(lease / 1000)
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, format('%d', ms)) end
  end
end
local held = redis.call('ZCARD', key)
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local retry, reset = 0, 0
if first[2] then
  reset = tonumber(last[2]) - now
  if allowed == 0 then retry = tonumber(first[2]) - now end
end
return {allowed, held, retry, reset}
`)

// renewLeases extends leases that still exist to a Lease from now, on the
// server's clock, and never brings one back: a lease already past its
// deadline is removed, not renewed, even when no acquire has pruned it
// yet. KEYS are the leases' sets (a set may repeat), ARGV[1] the lease in
// µs, ARGV[1+i] the id of the lease in KEYS[i]. The reply has, per lease,
// 1 (renewed) or 0 (gone: expired or released).
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
    end
  end
end
return out
`)
