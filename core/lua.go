package core

import "github.com/redis/go-redis/v9"

// bucketLua is the token bucket in integer micro-units, decided
// all-or-nothing over every policy of one request, with time from the Redis
// server's own clock (instance clocks never matter), as the function take
// that tokenBuckets calls once per request of a batch; tokenBucket, the
// script of a decision sent alone, is the same arithmetic written out.
//
// take decides cost n over keys[k+1..k+nk], the buckets of the request's
// policies ps[1..nk], each {capacity in units, refill in units per µs,
// units per token}. vals[1..nk] are the buckets' values, "<units>:<µs>": the
// tokens (in units) a bucket held at that microsecond of the server's clock;
// a missing key (false) is a full bucket. take writes into out from o+1:
// allowed, then per policy whole tokens left, µs until n tokens exist (0
// unless denied), µs until the bucket is full; and returns the next free
// index of out.
//
// A bucket's time never moves back (a failover can turn the clock back):
// otherwise the interval between would be refilled twice. When allowed, take
// writes each bucket through put, with an expiry (ms) at the moment it is
// full again plus a second; when denied it writes nothing. All numbers stay
// integers below 2^53, which New checks, so double arithmetic is exact and
// nothing drifts.
const bucketLua = `
local ceil, floor, find, sub, format = math.ceil, math.floor, string.find, string.sub, string.format
local function take(now, keys, k, nk, n, ps, vals, put, out, o)
  local tokens, stamps = {}, {}
  local allowed = 1
  for i = 1, nk do
    local p = ps[i]
    local cap, rate = p[1], p[2]
    local tok = cap
    local v = vals[i]
    if v then
      local sep = find(v, ':', 1, true)
      if sep then
        local units = tonumber(sub(v, 1, sep - 1))
        local ts = tonumber(sub(v, sep + 1))
        if units and ts then
          local el = now - ts
          if el < 0 then el = 0; stamps[i] = ts end
          if units < cap and el < ceil((cap - units) / rate) then
            tok = units + el * rate
          end
        end
      end
    end
    tokens[i] = tok
    if tok < n * p[3] then allowed = 0 end
  end
  out[o+1] = allowed
  for i = 1, nk do
    local p = ps[i]
    local cap, rate, unit = p[1], p[2], p[3]
    local need = n * unit
    local left = tokens[i]
    local retry = 0
    if allowed == 1 then
      left = left - need
    elseif left < need then
      retry = ceil((need - left) / rate)
    end
    local reset = ceil((cap - left) / rate)
    out[o+3*i-1] = floor(left / unit)
    out[o+3*i] = retry
    out[o+3*i+1] = reset
    if allowed == 1 then
      local stamp = stamps[i] or now
      put(keys[k+i], format('%d:%d', left, stamp), ceil((reset + stamp - now) / 1000) + 1000)
    end
  end
  return o + 1 + 3 * nk
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// tokenBucket decides one request: KEYS are its policies' buckets, ARGV[1]
// the cost n, then each policy's capacity in units, refill in units per µs
// and units per token. A missing key is a full bucket. It returns {allowed,
// then per policy: whole tokens left, µs until n tokens exist (0 unless
// denied), µs until the bucket is full}. Commands: TIME, MGET, and a SET per
// policy when allowed.
//
// It is bucketLua's take written out for one request, without the
// function, tables and closures that let tokenBuckets share it: this is the
// script of every decision sent alone, and that form costs Redis less per
// call (12.7–15.5 against 15.0–16.5 µs in one alternating run of 4×20 000
// calls on an otherwise idle Redis). TestBatchScriptMatchesSingle holds the two to the same
// answers; a change to one is a change to both.
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

// tokenBuckets decides several independent requests in one call, one after
// the other, each exactly as tokenBucket would: a later request sees what an
// earlier one took. ARGV[1] is the number of requests D and ARGV[2] the
// number of distinct policies P; then P times a policy's capacity, refill
// and unit; then, for each request in turn, its number of policies m, its
// cost n and the index (1..P) of each of its policies. KEYS are every
// request's buckets, in the same order. It returns the requests' answers one
// after the other.
//
// It reads every bucket with one MGET and writes each bucket that changed
// once, at the end, with the last request's value and expiry: commands
// TIME, MGET, and one SET per bucket taken from. RedisStore's batching uses
// it for a standalone Redis (a Cluster's keys are in different slots).
var tokenBuckets = redis.NewScript(bucketLua + `
local num = setmetatable({}, {__index = function(t, s) local x = tonumber(s); t[s] = x; return x end})
local pol, one = {}, {}
for j = 1, tonumber(ARGV[2]) do
  local p = {tonumber(ARGV[3*j]), tonumber(ARGV[3*j+1]), tonumber(ARGV[3*j+2])}
  pol[tostring(j)] = p
  one[tostring(j)] = {p}
end
local cur, px, order = {}, {}, {}
local got = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  if cur[KEYS[i]] == nil then cur[KEYS[i]] = got[i] end
end
local function put(key, v, ms)
  if not px[key] then order[#order+1] = key end
  cur[key] = v
  px[key] = ms
end
local out = {}
local o, k, a = 0, 0, 3 + 3 * tonumber(ARGV[2])
for _ = 1, tonumber(ARGV[1]) do
  local m, ps = num[ARGV[a]], nil
  local vals = {}
  if m == 1 then
    ps = one[ARGV[a+2]]
    vals[1] = cur[KEYS[k+1]]
  else
    ps = {}
    for i = 1, m do
      ps[i] = pol[ARGV[a+1+i]]
      vals[i] = cur[KEYS[k+i]]
    end
  end
  o = take(now, KEYS, k, m, num[ARGV[a+1]], ps, vals, put, out, o)
  k = k + m
  a = a + 2 + m
end
for _, key in ipairs(order) do
  redis.call('SET', key, cur[key], 'PX', px[key])
end
return out
`)
