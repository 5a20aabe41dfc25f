package transport

import "github.com/redis/go-redis/v9"

// leasesLua defines acquire, the lease step shared by AcquireLease and
// AcquireWithRate: a sorted set per (Name, subject) whose members are
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
// A call acquires in one set: once acquire finds it full, it stays full
// until the call ends (only an allowed acquire adds), so acquire answers
// the call's later ids that do not hold a lease from that first refusal.
//
// Scores are integers below 2^53 and are formatted with %.0f, never
// tostring, which keeps 14 digits.
const leasesLua = `
local ceil, format = math.ceil, string.format
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local refused
local function acquire(key, id, max, lease, decide)
  if refused and not redis.call('ZSCORE', key, id) then
    if decide then decide(2) end
    return {0, refused[1], refused[2], refused[3], 0}
  end
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
  if full then refused = {held, retry, reset} end
  return {allowed, held, retry, reset, pruned}
end
`

// AcquireLease takes one of a key's slots for each of a call's lease ids,
// in turn (leasesLua's acquire): the first find the free slots, the rest
// are refused, each answered as if alone at its turn. KEYS[1] is the set;
// ARGV Max, the lease in µs, then the ids. The reply is acquire's for
// each id, one after the other.
var AcquireLease = redis.NewScript(leasesLua + `
local max, lease, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {}
for i = 3, #ARGV do
  local r = acquire(KEYS[1], ARGV[i], max, lease)
  for j = 1, 5 do out[#out + 1] = r[j] end
end
return out
`)

// AcquireWithRate takes a slot and a token of the rate limit of the same
// subject, all or nothing, for each of a call's lease ids in turn:
// leasesLua's acquire with the token bucket (tokenBucketsLua,
// run as a function, the very arithmetic of every rate decision) as its decide. A
// refused slot takes no token (the bucket is only peeked at) and refused
// tokens add no lease; a later id sees what an earlier one took.
//
// KEYS[1] is the lease set, then the buckets, then a replay record per
// id (each id's tokens are one TokenBuckets call of their own); ARGV
// Max, the lease in µs, the number of ids N, the ids, then TokenBuckets'
// arguments for one request. The reply is, per id, acquire's, then
// TokenBuckets' reply for the id. A re-sent call is answered once more
// from the replay records that its first run wrote, taking nothing
// again.
var AcquireWithRate = redis.NewScript(acquireWithRateLua)

// acquireWithRateLua is AcquireWithRate's source.
const acquireWithRateLua = leasesLua + acquireWithRateMain

const acquireWithRateMain = `
local function buckets(KEYS, ARGV)
` + mgetLua + tokenBucketsLua + `
end
local max, lease, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local p = #KEYS - 1 - n
local bk, ba = {}, {}
for i = 1, p do bk[i] = KEYS[1 + i] end
for i = 4 + n, #ARGV do ba[#ba + 1] = ARGV[i] end
local opAt = 5 + tonumber(ba[3])
local reply
local function decide(op)
  ba[opAt] = op
  reply = buckets(bk, ba)
  return string.sub(reply, 1, 2) == '1,'
end
local out = {}
for i = 1, n do
  bk[p + 1] = KEYS[1 + p + i]
  local r = acquire(KEYS[1], ARGV[3 + i], max, lease, decide)
  for j = 1, 5 do out[#out + 1] = r[j] end
  out[#out + 1] = reply
end
return out
`

// RenewLeases extends leases that still exist to a Lease from now, on the
// server's clock, and never brings one back: a lease already past its
// deadline is removed, not renewed, even when no acquire has pruned it
// yet. KEYS are the leases' sets (a set may repeat), ARGV[1] the lease in
// µs, ARGV[1+i] the id of the lease in KEYS[i]. The reply has, per lease,
// 1 (renewed), 0 (gone: released, or pruned already) or 2 (expired, and
// pruned now).
var RenewLeases = redis.NewScript(`
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
