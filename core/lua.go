package core

import "github.com/redis/go-redis/v9"

// tokenBucket is the token bucket in integer micro-units, decided
// all-or-nothing over every key it is given, with time from the Redis
// server's own clock (instance clocks never matter).
//
// KEYS[i] is the bucket of policy i; its value is "<units>:<µs>", the tokens
// (in units) it held at that microsecond of the server's clock. A missing key
// is a full bucket. ARGV[1] is the cost n in tokens, then for each policy its
// capacity in units, its refill in units per µs and its units per token.
//
// It returns {allowed, then per policy: whole tokens left, µs until n tokens
// exist (0 unless denied), µs until the bucket is full}. A bucket's time
// never moves back (a failover can turn the clock back): otherwise the
// interval between would be refilled twice. When allowed it
// writes each bucket with an expiry at the moment it is full again (plus a
// second); when denied it writes nothing. Commands: TIME, MGET, and one SET
// per policy when allowed. All numbers stay integers below 2^53, which New
// checks, so double arithmetic is exact and nothing drifts.
var tokenBucket = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local vals = redis.call('MGET', unpack(KEYS))
local tokens = {}
local stamps = {}
local allowed = 1
for i = 1, #KEYS do
  local cap = tonumber(ARGV[3*i-1])
  local rate = tonumber(ARGV[3*i])
  local tok = cap
  local v = vals[i]
  if v then
    local sep = string.find(v, ':', 1, true)
    if sep then
      local units = tonumber(string.sub(v, 1, sep - 1))
      local ts = tonumber(string.sub(v, sep + 1))
      if units and ts then
        local el = now - ts
        if el < 0 then el = 0; stamps[i] = ts end
        if units < cap and el < math.ceil((cap - units) / rate) then
          tok = units + el * rate
        end
      end
    end
  end
  tokens[i] = tok
  if tok < n * tonumber(ARGV[3*i+1]) then allowed = 0 end
end
local out = {allowed}
for i = 1, #KEYS do
  local cap = tonumber(ARGV[3*i-1])
  local rate = tonumber(ARGV[3*i])
  local unit = tonumber(ARGV[3*i+1])
  local need = n * unit
  local left = tokens[i]
  local retry = 0
  if allowed == 1 then
    left = left - need
  elseif left < need then
    retry = math.ceil((need - left) / rate)
  end
  local reset = math.ceil((cap - left) / rate)
  out[3*i-1] = math.floor(left / unit)
  out[3*i] = retry
  out[3*i+1] = reset
  if allowed == 1 then
    local stamp = stamps[i] or now
    redis.call('SET', KEYS[i], string.format('%d:%d', left, stamp), 'PX', math.ceil((reset + stamp - now) / 1000) + 1000)
  end
end
return out
`)
