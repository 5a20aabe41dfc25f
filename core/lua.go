package core

import "github.com/redis/go-redis/v9"

// tokenBuckets is the token bucket, decided atomically on the Redis server
// with time from its own clock (instance clocks never matter), for a batch
// of requests in turn: a later request sees what an earlier one took. A
// lone decision is a batch of one. It is the only script RedisStore sends.
//
// ARGV: the call's id, the number of requests D, the number of distinct
// policies P; then per policy its capacity in units, refill in units per
// tick, units per token and µs per tick; then per request its number of
// policies m, its operation, its cost n and the index (1..P) of each of
// its policies. KEYS are every request's buckets, in the same order. The
// operations: 1 takes n tokens, all or nothing over the request's
// policies; 2 peeks (whether n would be taken, taking nothing); 3 refunds
// n tokens to every policy, each capped at its capacity. The reply is, per
// request: allowed (1 or 0; a refund is always 1), then per policy whole
// tokens left, µs until n tokens exist (0 unless not allowed) and µs until
// the bucket is full.
//
// A bucket's value is "<units>:<tick>:<id>": the tokens (in units) it held
// at that tick of the server's clock, and the id of the call that wrote it;
// a missing key is a full bucket. Only an allowed take and a refund write; a
// bucket's tick never moves back (a failover can turn the clock back:
// otherwise an interval would be refilled twice). Each bucket taken from is
// written once, at the end, with an expiry (ms) a second after it would be
// full again. Commands: TIME, MGET, and one SET per bucket taken from.
//
// Exactly once: go-redis re-sends a script whose reply was lost on a
// broken connection. A call that finds its own id on one of its buckets
// has already run, and takes or refunds nothing again: a lone take is
// answered allowed (it was: only an allowed take writes) with its buckets
// as they are now; the takes of a larger batch, whose individual answers
// are lost, are answered denied — early, never over the limit.
//
// Every number stays an integer below 2^53, which New checks, so the
// double arithmetic of Lua is exact and nothing drifts.
var tokenBuckets = redis.NewScript(`
local ceil, floor, find, sub, format = math.ceil, math.floor, string.find, string.sub, string.format
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id = ARGV[1]
local D, P = tonumber(ARGV[2]), tonumber(ARGV[3])
local pol = {}
for j = 1, P do
  local tick = tonumber(ARGV[4*j+3])
  local nowt = floor(now / tick)
  pol[tostring(j)] = {tonumber(ARGV[4*j]), tonumber(ARGV[4*j+1]), tonumber(ARGV[4*j+2]), tick, nowt, now - nowt * tick}
end
local vals = redis.call('MGET', unpack(KEYS))
local state, replay = {}, false
for i = 1, #KEYS do
  local key = KEYS[i]
  if state[key] == nil then
    local st = false
    local v = vals[i]
    if v then
      local s1 = find(v, ':', 1, true)
      if s1 then
        local s2 = find(v, ':', s1 + 1, true)
        local units, ts = tonumber(sub(v, 1, s1 - 1)), tonumber(sub(v, s1 + 1, (s2 or 0) - 1))
        if s2 and sub(v, s2 + 1) == id then replay = true end
        if units and ts then st = {units, ts} end
      end
    end
    state[key] = st
  end
end
local out, order, px = {}, {}, {}
local o, k, a = 0, 0, 4 + 4 * P
for _ = 1, D do
  local m, op, n = tonumber(ARGV[a]), tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  local tokens = {}
  local allowed = 1
  for i = 1, m do
    local p = pol[ARGV[a+2+i]]
    local cap, rate = p[1], p[2]
    local tok = cap
    local st = state[KEYS[k+i]]
    if st then
      local el = p[5] - st[2]
      if el < 0 then el = 0 end
      if st[1] < cap and el < ceil((cap - st[1]) / rate) then tok = st[1] + el * rate end
    end
    tokens[i] = tok
    if tok < n * p[3] then allowed = 0 end
  end
  local write = 0
  if op == 1 then
    if replay then
      if D == 1 then allowed = 1 else allowed = 0 end
    elseif allowed == 1 then
      write = -1
    end
  elseif op == 3 then
    allowed = 1
    if not replay then write = 1 end
  end
  out[o+1] = allowed
  for i = 1, m do
    local p = pol[ARGV[a+2+i]]
    local cap, rate, unit, tick, nowt, phase = p[1], p[2], p[3], p[4], p[5], p[6]
    local need = n * unit
    local left = tokens[i]
    local retry, reset = 0, 0
    if write == -1 then
      left = left - need
    elseif write == 1 then
      left = left + need
      if left > cap then left = cap end
    elseif allowed == 0 and left < need then
      retry = ceil((need - left) / rate) * tick - phase
    end
    if left < cap then reset = ceil((cap - left) / rate) * tick - phase end
    out[o+3*i-1] = floor(left / unit)
    out[o+3*i] = retry
    out[o+3*i+1] = reset
    if write ~= 0 then
      local key = KEYS[k+i]
      local st = state[key]
      local stamp = nowt
      if st and st[2] > nowt then stamp = st[2] end
      if not px[key] then order[#order+1] = key end
      state[key] = {left, stamp}
      px[key] = ceil(((stamp - nowt) * tick + reset) / 1000) + 1000
    end
  end
  o = o + 1 + 3 * m
  k = k + m
  a = a + 3 + m
end
for _, key in ipairs(order) do
  local st = state[key]
  redis.call('SET', key, format('%d:%d:%s', st[1], st[2], id), 'PX', px[key])
end
return out
`)
