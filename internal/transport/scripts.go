package transport

import "github.com/redis/go-redis/v9"

// TokenBuckets is the token bucket, decided atomically on the Redis server
// with time from its own clock (instance clocks never matter), for a batch
// of requests in turn: a later request sees what an earlier one took. A
// lone decision is a batch of one. Every rate decision runs it
// (TokenBucketsAcross wraps it).
//
// ARGV: the replay record's expiry (s), the number of requests D, the
// number of distinct policies P, the number R of buckets asked again;
// then each policy as "capacity:refill:unit:tick" (units, units per tick,
// units per token, µs per tick); then, for each bucket asked again, its
// position in KEYS and that of its previous one; then the requests in
// runs of alike ones: a run's operation, cost n, number of policies m and
// the index (1..P) of each, then how many requests in a row ask that.
// KEYS are every request's buckets, in the same order, then the call's
// replay record (named by the call's id); plain takes (a lone take
// under one policy, or a batch of takes of one n under one policy, each
// of its own bucket) send only the record's expiry, the policy and n,
// and takes across subjects alike (a lone one, or a batch whose
// buckets may repeat) the record's expiry, "A", then each bucket's
// policy and cost. The operations: 1
// takes n tokens, all or nothing over the request's policies; 2 peeks (whether n would be taken, taking nothing); 3 refunds
// n tokens to every policy, each capped at its capacity; 4 to 7 wait or
// owe (DESIGN §11: reserve, charge, cancel, pause; see waiting), and
// their run carries one more argument after its count; 8 and 10 are 1
// and 3 for a request across subjects (core.AllowAll: its buckets are
// of several subjects, all or nothing), whose run carries after its
// count each bucket's own cost (a take's 0 takes nothing and asks for one
// token). The reply is one
// string of integers separated by ",": per request, allowed (1 or 0; a
// refund is always 1), then per policy whole tokens left (0 while the
// bucket owes), µs until n tokens exist (0 unless not allowed; a
// reservation's: its wait) and µs until the bucket is full; operations 4
// to 7 end with one more (a reservation's time on the server's clock in
// µs, a charge's tokens forgiven, else 0).
//
// A bucket may owe tokens (its units below 0, DESIGN §11): a take is
// then refused until the refill repays the debt and n.
//
// A bucket's value is "<units>:<tick>:<policy>": the tokens (in units) it
// held at that tick of the server's clock, counted in the policy that
// wrote it; a missing key is a full bucket. So any limit reads what any
// other wrote: what it has spent carries over (capacity − spent in the
// reader's units, rounded toward fewer tokens, clamped to [0, capacity];
// a debt carries over as it is), and of two readings the larger holds:
// the bucket refilled to now in its own policy, then carried; and the
// bucket carried as of its stamp, then refilled at the reader's rate
// since — the clamped state the reader refills from, though its denials
// write nothing (DESIGN §3). A write puts the bucket in the reader's
// policy, but when the first reading was clamped at 0 (the writer spent
// more than the reader's capacity, which the reader's units would lose):
// then it stays in the writer's, refilled to now, less what the reader
// took (plus what it gave back), its stamp set back so that the second
// reading still gives the reader what it has left. A bucket in the
// reader's own policy is read with no rounding at all. The waits of a decision that writes nothing
// (a denial, a peek) are those of whichever reading gets there first.
//
// Only an allowed take, a refund and operations 4 to 7 (but a refused
// reservation, or a cancel once its reservation is due) write, each bucket once, where its
// last request is decided (a bucket asked again passes what it holds from
// one request to the next), stamped with the current tick (or set back,
// as above), expiring one to two seconds after it would be full again
// (under either policy, as above; whole seconds, each
// formatted once per call). A bucket stamped ahead of the clock (a
// failover or an NTP step moved it back) is read as of its stamp, and any
// take re-stamps it at the current tick, so that no refusal outlasts the
// RetryAfter it announced. Commands: TIME, MGET, one SETEX per bucket written, and one
// SETEX of the replay record when anything was written.
//
// Exactly once: go-redis re-sends a script whose reply was lost on a
// broken connection. A call that wrote anything keeps its reply under its
// id for a few seconds (the replay record, in the slot of its first
// bucket); a re-sent call finds it and returns it, taking and refunding
// nothing again, whatever other calls wrote in between.
//
// Every number stays an integer below 2^53, which core.New checks, so the
// double arithmetic of Lua is exact and nothing drifts.
var TokenBuckets = redis.NewScript(mgetLua + tokenBucketsLua)

// TokenBucketsAcross is TokenBuckets for a batch of one Redis Cluster
// node, whose subjects' slots differ. Redis 7 lets a script flagged
// allow-cross-slot-keys reach keys it did not declare in any slot of its
// node (a key of another node is an error, raised before anything is
// written: the script reads every bucket first). So KEYS holds only the
// replay record, whose slot routes the call; the buckets follow
// TokenBuckets' arguments in ARGV, then their count; each is read alone
// (MGET wants one slot).
var TokenBucketsAcross = redis.NewScript(acrossLua + tokenBucketsLua)

// mgetLua reads TokenBuckets' keys at once, into vals: they share a slot.
// unpack is a global of Lua 5.1 (Redis, Valkey, KeyDB), table.unpack of
// 5.2 on (Dragonfly's 5.4).
const mgetLua = `local vals = redis.call('MGET', (table.unpack or unpack)(KEYS))
`

// acrossLua is TokenBucketsAcross' prologue: it reads each key alone.
const acrossLua = `#!lua flags=allow-cross-slot-keys
local nb, record = tonumber(ARGV[#ARGV]), KEYS[1]
local KEYS = {}
for i = 1, nb do KEYS[i] = ARGV[#ARGV - nb - 1 + i] end
KEYS[nb + 1] = record
local vals, seen = {}, {}
for i = 1, #KEYS do
  local v = seen[KEYS[i]]
  if v == nil then v = redis.call('GET', KEYS[i]); seen[KEYS[i]] = v end
  vals[i] = v
end
`

// tokenBucketsLua is TokenBuckets' source; AcquireWithRate
// (leasescripts.go) runs it as a function.
const tokenBucketsLua = `
local ceil, floor, match, format, sub, find = math.ceil, math.floor, string.match, string.format, string.sub, string.find
local KEYS = KEYS
local nk = #KEYS
if vals[nk] then return vals[nk] end
-- Numbers come as strings: arithmetic converts one (x + 0) at half
-- tonumber's cost, which converts twice, where it cannot fail (a reply of
-- TIME, our own arguments, digits a match has checked).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
-- Plain takes come as three arguments: the record's expiry, the policy
-- and the cost n, one request per bucket (none asked twice), each a take
-- of n under that policy: a lone take, or a batch of them. Each bucket in
-- that policy (or none), stamped no later than now and without loans, is
-- decided here in a straight line, by the arithmetic below for that
-- case; from the first that is not, the rest goes on below, in the
-- arguments of a batch.
local ARGV, k, wrote = ARGV, 0, false
if #ARGV == 3 then
  local desc = ARGV[2]
  local cap, rate, unit, tick = match(desc, '^(%d+):(%d+):(%d+):(%d+)$')
  if cap then
    cap, rate, unit, tick = cap + 0, rate + 0, unit + 0, tick + 0
    if rate > 0 and unit > 0 and tick > 0 then
      local at = floor(now / tick)
      -- A batch formats each value's suffix once.
      local phase, need, sfx = now - at * tick, ARGV[3] * unit, nk > 2 and format(':%d:%s', at, desc)
      local e, lastEx = false, false
      while k < nk - 1 do
        local v, tok = vals[k + 1], cap
        if v then
          local units, ts, d = match(v, '^(-?%d+):(%d+):(.*)')
          if d ~= desc then break end
          local el = at - ts
          if el < 0 then break end
          tok = units + 0
          if tok < cap and el < ceil((cap - tok) / rate) then tok = tok + el * rate else tok = cap end
        end
        k = k + 1
        local reset = 0
        if tok < need then
          if tok < cap then reset = ceil((cap - tok) / rate) * tick - phase end
          local rem = floor(tok / unit)
          if rem < 0 then rem = 0 end
          vals[k] = format('0,%d,%d,%d', rem, ceil((need - tok) / rate) * tick - phase, reset)
        else
          local left = tok - need
          if left < cap then reset = ceil((cap - left) / rate) * tick - phase end
          vals[k] = format('1,%d,0,%d', floor(left / unit), reset)
          local ex = ceil(reset / 1000000) + 1
          if ex ~= lastEx then e, lastEx = format('%d', ex), ex end
          redis.call('SETEX', KEYS[k], e, sfx and format('%d%s', left, sfx) or format('%d:%d:%s', left, at, desc))
          wrote = true
        end
      end
      if k == nk - 1 then
        local reply = k == 1 and vals[1] or table.concat(vals, ',', 1, k)
        if wrote then redis.call('SETEX', KEYS[nk], ARGV[1], reply) end
        return reply
      end
    end
  end
  ARGV = {ARGV[1], nk - 1 - k, '1', '0', desc, '1', ARGV[3], '1', '1', nk - 1 - k}
elseif ARGV[2] == 'A' then
  -- Takes across subjects (AllowAll on one node) come short too: the
  -- record's expiry, 'A', then each bucket's policy and cost, for a lone
  -- take or a batch of takes alike (KEYS: each request's buckets in
  -- turn); a cost 0 takes nothing and asks for one token. When every
  -- bucket is in its policy (or none) and stamped no later than now (not
  -- in debt, without loans), and, in a batch, none is asked twice in one
  -- request or under two policies, a straight line decides each request,
  -- all or nothing; else the whole batch goes on below, as a batch of
  -- takes across subjects (operation 8). (A lone request's bucket asked
  -- twice, under one policy as core.AllowAll wants, is read twice: as
  -- below, the last ask that takes writes.) C holds per bucket of a request its
  -- policy's numbers (parsed once per call), the current tick, its cost,
  -- its policy, and where its values' suffix is (formatted once needed).
  -- Every bucket is read before any request is decided, so that the
  -- batch goes on below whole, as it came: vals[b] then holds the tokens
  -- of the bucket first asked at b, or -f for one asked again, first at
  -- f. A bucket asked by several requests (a route's, a tenant's) is
  -- read once and written once, where it is last asked (L[f]), if any
  -- request took from it (W[f]); S[f] holds its tokens meanwhile.
  local m, C = (#ARGV - 2) / 2, {}
  for i = 1, m do
    local j, desc, o = 9 * i, ARGV[1 + 2 * i], 0
    for h = 1, i - 1 do
      if C[9 * h - 2] == desc then o = 9 * h; break end
    end
    if o > 0 then
      C[j - 8], C[j - 7], C[j - 6], C[j - 5], C[j - 4], C[j - 1] = C[o - 8], C[o - 7], C[o - 6], C[o - 5], C[o - 4], o
    else
      local cap, rate, unit, tick = match(desc, '^(%d+):(%d+):(%d+):(%d+)$')
      if not cap then C = false; break end
      cap, rate, unit, tick = cap + 0, rate + 0, unit + 0, tick + 0
      if rate <= 0 or unit <= 0 or tick <= 0 then C = false; break end
      C[j - 8], C[j - 7], C[j - 6], C[j - 5], C[j - 4], C[j - 1] = cap, rate, unit, tick, floor(now / tick), j
    end
    C[j - 3], C[j - 2], C[j] = ARGV[2 + 2 * i] + 0, desc, false
  end
  local seen, L, S, W, e, lastEx = nk - 1 > m and {}, false, false, false, false, false
  while C and k < nk - 1 do
    for i = 1, m do
      local b, j = k + i, 9 * i
      local key, f = KEYS[b], nil
      if seen then f = seen[key] end
      if f == nil then
        if seen then seen[key] = b end
        local cap, tok, v = C[j - 8], C[j - 8], vals[b]
        if v then
          local units, ts, d = match(v, '^(%d+):(%d+):(.*)')
          if d ~= C[j - 2] then C = false; break end
          local el = C[j - 4] - ts
          if el < 0 then C = false; break end
          tok = units + 0
          if tok < cap and el < ceil((cap - tok) / C[j - 7]) then tok = tok + el * C[j - 7] else tok = cap end
        end
        vals[b] = tok
      else
        if (L and L[f] or f) > k or C[9 * ((f - 1) % m + 1) - 2] ~= C[j - 2] then C = false; break end
        if not L then L, S, W = {}, {}, {} end
        L[f], vals[b] = b, -f
      end
    end
    k = k + m
  end
  k = 0
  while C and k < nk - 1 do
    local all = true
    for i = 1, m do
      local tok, n, unit = vals[k + i], C[9 * i - 3], C[9 * i - 6]
      if tok < 0 then tok = S[-tok] end
      if tok < n * unit or n == 0 and tok < unit then all = false end
    end
    for i = 1, m do
      local j, b = 9 * i, k + i
      local cap, rate, unit, tick, at, n = C[j - 8], C[j - 7], C[j - 6], C[j - 5], C[j - 4], C[j - 3]
      local tok, f, last = vals[b], b, b
      if tok < 0 then f = -tok; tok, last = S[f], L[f] elseif L then last = L[b] or b end
      local phase, need, reset = now - at * tick, n * unit, 0
      local left = tok
      if not all then
        if need == 0 then need = unit end
        local retry = 0
        if tok < need then retry = ceil((need - tok) / rate) * tick - phase end
        if tok < cap then reset = ceil((cap - tok) / rate) * tick - phase end
        vals[b] = format(i == 1 and '0,%d,%d,%d' or '%d,%d,%d', floor(tok / unit), retry, reset)
      else
        left = tok - need
        if left < cap then reset = ceil((cap - left) / rate) * tick - phase end
        vals[b] = format(i == 1 and '1,%d,0,%d' or '%d,0,%d', floor(left / unit), reset)
      end
      local w = all and need > 0
      if last ~= b then
        -- Asked again: what it holds passes on.
        S[f] = left
        if w then W[f] = true end
      elseif w or f ~= b and W[f] then
        -- Its last ask, after a take: written as that take left it,
        -- which reset counts from.
        local o, ex = C[j - 1], ceil(reset / 1000000) + 1
        local sfx = C[o]
        if not sfx then sfx = format(':%d:%s', at, C[j - 2]); C[o] = sfx end
        if ex ~= lastEx then e, lastEx = format('%d', ex), ex end
        redis.call('SETEX', KEYS[b], e, format('%d%s', left, sfx))
        wrote = true
      end
    end
    k = k + m
  end
  if C then
    local reply = table.concat(vals, ',', 1, k)
    if wrote then redis.call('SETEX', KEYS[nk], ARGV[1], reply) end
    return reply
  end
  local D, R = floor((nk - 1) / m), 0
  local a, last = {ARGV[1], D, m, 0}, {}
  for i = 1, m do a[4 + i] = ARGV[1 + 2 * i] end
  -- Each bucket asked again: its position, and its previous one's. The
  -- buckets the straight line read (their tokens in vals) are read again.
  for b = 1, nk - 1 do
    if type(vals[b]) == 'number' then vals[b] = redis.call('GET', KEYS[b]) end
    local e = last[KEYS[b]]
    if e then a[5 + m + 2 * R], a[6 + m + 2 * R], R = b, e, R + 1 end
    last[KEYS[b]] = b
  end
  a[4] = R
  local o = 4 + m + 2 * R
  a[o + 1], a[o + 2], a[o + 3] = '8', '0', m
  for i = 1, m do a[o + 3 + i] = i end
  a[o + 4 + m] = D
  for i = 1, m do a[o + 4 + m + i] = ARGV[2 + 2 * i] end
  ARGV = a
end
-- Small numbers (counts, operations, costs, indexes) repeat: each distinct
-- one is parsed once (C's strtod, dear even for "1").
local ints = {['0'] = 0, ['1'] = 1}
local function int(x)
  local v = ints[x]
  if v == nil then v = x + 0; ints[x] = v end
  return v
end
local D, P, R = int(ARGV[2]), int(ARGV[3]), int(ARGV[4])
local pols, byDesc = {false}, {}
local function policy(desc)
  local p = byDesc[desc]
  if p == nil then
    p = false
    local cap, rate, unit, tick = match(desc, '^(%d+):(%d+):(%d+):(%d+)$')
    if cap then
      cap, rate, unit, tick = cap + 0, rate + 0, unit + 0, tick + 0
      if rate > 0 and unit > 0 and tick > 0 then
        local at = floor(now / tick)
        p = {cap, rate, unit, tick, at, desc, now - at * tick, false}
      end
    end
    byDesc[desc] = p
  end
  return p
end
for j = 1, P do pols[j] = policy(ARGV[4 + j]) end
-- A bucket is read where it is first asked and written where it is last
-- asked. A bucket asked again (R pairs: its position in KEYS, that of its
-- previous one) passes its state on: U, T and Q hold units (false: full),
-- stamp and policy (false: not one), as read or as written, W its
-- expiry if written, and LN its loans (see lending).
local from, later, U, T, Q, W, LN = false, false, nil, nil, nil, nil, nil
if R > 0 then
  from, later, U, T, Q, W, LN = {}, {}, {}, {}, {}, {}, {}
  for j = 5 + P, 3 + P + 2 * R, 2 do
    local i, e = ARGV[j] + 0, ARGV[j + 1] + 0
    from[i], later[e] = e, true
  end
end
-- Numbers go out as integers formatted by string.format: Lua's own
-- conversion ("%.14g") costs more, and would print 1e+15. Each format
-- costs about as much as deciding a bucket: a request's part of the reply
-- is one per policy, a bucket's value one per write.
local exs = {}
local function put(key, ex, units, p, ln, at)
  local sfx = false
  if ln and ln[1] then
    -- Loans out: the bucket lives until the last ends.
    local parts, last = {}, 0
    for j = 1, #ln do
      local l = ln[j]
      parts[j] = format(';%s,%d,%d', l[1], l[2], l[3])
      if l[3] > last then last = l[3] end
    end
    sfx = table.concat(parts)
    last = ceil((last - now) / 1000000) + 1
    if last > ex then ex = last end
  end
  local e = exs[-ex] -- a negative key: gopher-lua (miniredis) would grow an array to a long expiry
  if e == nil then e = format('%d', ex); exs[-ex] = e end
  if not p[8] then p[8] = format(':%d:', p[5]) .. p[6] end
  local st = p[8]
  if at and at ~= p[5] then st = format(':%d:', at) .. p[6] end -- a stamp set back
  if sfx then
    redis.call('SETEX', key, e, format('%d', units) .. st .. sfx)
  else
    redis.call('SETEX', key, e, format('%d', units) .. st)
  end
  wrote = true
end
-- Lending (operation 12, core's Config.Borrow; internal/bucket's Lender
-- is its model and proof). A bucket with slices out on loan ends its
-- value with them, ";<loan id>,<tokens>,<end µs>" each; without them it
-- reads as it always has. Its units are then what it holds plus the
-- tokens on loan (L): they refill as ever, capped at the capacity, so
-- the tokens it may take or lend, units less L, refill at most to the
-- capacity less L. A loan ends at its end (refilled to then, the bucket
-- loses its tokens, spent or not) or when returned while still out (it
-- loses the tokens spent). loans reads such a suffix of a bucket
-- holding units at tick ts in policy q, and ends the loans due by now:
-- it returns the units, the stamp and the loans still out ({id, tokens,
-- end} each, in the order they end).
local function loans(rest, units, ts, q)
  local ln = {}
  for id, t, e in string.gmatch(rest, ';([^,;]+),(%d+),(%d+)') do ln[#ln + 1] = {id, t + 0, e + 0} end
  table.sort(ln, function(x, y) return x[3] < y[3] end)
  local cap, rate, unit, tick = q[1], q[2], q[3], q[4]
  while ln[1] and ln[1][3] <= now do
    local et = floor(ln[1][3] / tick)
    if et > ts then
      local el = et - ts
      if units >= cap or el >= ceil((cap - units) / rate) then units = cap else units = units + el * rate end
      ts = et
    end
    units = units - ln[1][2] * unit
    table.remove(ln, 1)
  end
  return units, ts, ln
end
-- per policy of the run's requests: its policy; per policy of the
-- request being decided: tokens, whether stamped ahead, units in its own
-- policy, and that policy. A request's part of the reply goes where its
-- buckets' values were, in vals.
local rp, toks, aheads, owns, kept, stamped = {false}, {false}, {false}, {false}, {false}, {false}
-- per policy of the request being decided: the tokens its bucket has on
-- loan, and its loans (false: none).
local lents, lns = {false}, {false}
-- waiting is the arithmetic of operations 4 to 7 on policy p's bucket,
-- which holds tok units, for n tokens (need units); x is the operation's
-- argument. 4 reserves: takes n, the bucket owing what it lacks (the
-- caller checked that they exist within x µs), and waits until they do;
-- 5 charges: takes n, never refused, the debt bounded by the capacity or
-- what refills in x µs (MaxWait), whichever is more: the excess is
-- forgiven (extra: the most tokens forgiven), and waits until a token
-- exists; 6 cancels a reservation due at x µs (the caller checked it is
-- not yet due): gives back n less what later bookings counted on (the
-- debt still owed at x), capped at the capacity; 7 pauses: the bucket
-- owes at least what refills in x µs. It returns the units left, the µs
-- to wait and extra.
local function waiting(op, x, p, n, need, tok, extra)
  local cap, rate, unit, tick, phase = p[1], p[2], p[3], p[4], p[7]
  local left, wait = tok - need, 0
  if op == 4 then
    if left < 0 then wait = ceil(-left / rate) * tick - phase end
  elseif op == 5 then
    local most = floor(x / tick) * rate
    if most < cap then most = cap end
    if most > 4503599627370496 then most = 4503599627370496 end
    -- Takes n down to -most at most, the rest forgiven; n is clamped
    -- before it is scaled (need may be past 2^53): k, the whole tokens
    -- the bucket can give, is (tok + most) / unit rounded down, summed
    -- in parts below 2^53. A bucket owing most already keeps its debt.
    local k, a = 0, 0
    if tok > -most then
      local b = floor(most / unit)
      a = floor(tok / unit)
      k = a + b
      if tok - a * unit + most - b * unit >= unit then k = k + 1 end
    end
    if n > k then
      if n - k > extra then extra = n - k end
      left = tok
      if -most < tok then left = -most end
    elseif n > a then
      left = tok - a * unit - (n - a) * unit
    else
      left = tok - n * unit
    end
    if left < unit then wait = ceil((unit - left) / rate) * tick - phase end
  elseif op == 6 then
    local back = need + tok + (floor(x / tick) - p[5]) * rate
    left = tok
    if back > need then back = need end
    if back > 0 then
      left = tok + back
      if left > cap then left = cap end
    end
  else
    local owe = floor(x / tick) * rate
    if owe > 4503599627370496 then owe = 4503599627370496 end
    left = tok
    if -owe < tok then left = -owe end
  end
  return left, wait, extra
end
-- carry returns the units under policy p of a bucket holding x units
-- under policy q: a debt as it is (rounded toward more of it), else p's
-- capacity less what was spent (rounded toward fewer tokens), at least 0;
-- and then true when that spend was more than p's capacity (lost).
local function carry(x, q, p)
  if x < 0 then
    local d = -x * p[3]
    if d < 9007199254740992 then return -ceil(d / q[3]) end
    return -ceil(-x / q[3] * p[3])
  end
  local spent = (q[1] - x) * p[3]
  if spent < 9007199254740992 then spent = ceil(spent / q[3]) else spent = ceil((q[1] - x) / q[3] * p[3]) end
  if spent >= p[1] then return 0, spent > p[1] end
  return p[1] - spent
end
local a, d = 5 + P + 2 * R, 0
while d < D do
  local op, n, m = int(ARGV[a]), int(ARGV[a+1]), int(ARGV[a+2])
  for i = 1, m do rp[i] = pols[int(ARGV[a+2+i])] end
  local count = int(ARGV[a+3+m])
  a, d = a + 4 + m, d + count
  -- Operations 4 to 7 take one more argument (see waiting); 8 and 10
  -- are 1 and 3 across subjects, each bucket with its own cost, given
  -- after the count (a take's 0 takes nothing and asks for one token).
  -- 12 lends (in runs of one): the loan's term (µs), the id of a loan to
  -- return and of one to lend ('-': none), then per policy the returned
  -- loan's tokens unspent and the tokens to lend.
  local x, cs, lend = 0, false, false
  if op == 12 then
    x, lend = ARGV[a] + 0, {ARGV[a + 1], ARGV[a + 2]}
    for i = 1, 2 * m do lend[2 + i] = ARGV[a + 2 + i] + 0 end
    a = a + 3 + 2 * m
  elseif op > 7 then
    cs, op = {}, op - 7
    for i = 1, m do cs[i] = int(ARGV[a + i - 1]) end
    a = a + m
  elseif op > 3 then x, a = ARGV[a] + 0, a + 1 end
  for _ = 1, count do
    local allowed = 1
    for i = 1, m do
      -- The units the bucket holds now in policy p's units, whether it is
      -- stamped ahead of the clock, and the units it holds in its own
      -- policy q.
      local p, b = rp[i], k + i
      local units, ts, rq, ln = false, 0, false, false
      local e = from and from[b]
      if e then
        units, ts, rq, ln = U[e], T[e], Q[e], LN[e]
      else
        local v = vals[b]
        if v then
          local u, x, desc = match(v, '^(-?%d+):(%d+):(.*)')
          if u then
            -- byDesc never holds a desc with loans (no policy has a ';'):
            -- only a miss looks for them.
            units, ts, rq = u + 0, x + 0, byDesc[desc]
            if rq == nil then
              local at = find(desc, ';', 1, true)
              if at then
                rq = policy(sub(desc, 1, at - 1))
                units, ts, ln = loans(sub(desc, at), units, ts, rq or p)
              else
                rq = policy(desc)
              end
            end
          end
        end
      end
      if later and later[b] then U[b], T[b], Q[b], W[b], LN[b] = units, ts, rq, e and W[e], ln end
      local tok, ahead, own, q, st, lent = p[1], false, nil, nil, nil, 0
      if units then
        q = rq or p
        local el = q[5] - ts
        tok, ahead = units, el < 0
        if ahead then el = 0 end
        if tok >= q[1] or el >= ceil((q[1] - tok) / q[2]) then tok = q[1] else tok = tok + el * q[2] end
        if ln then
          -- What may be taken or lent is what the bucket holds less L.
          for j = 1, #ln do lent = lent + ln[j][2] end
          tok, units = tok - lent * q[3], units - lent * q[3]
        end
        own = tok
        if q ~= p then
          -- Two readings, the larger holds: the bucket refilled in q to
          -- now, then carried; and the bucket as q left it at its stamp,
          -- carried, then refilled at p's own rate since (the clamped
          -- state p refills from, whatever p's decisions wrote).
          tok, st = carry(own, q, p), carry(units, q, p)
          local pel = p[5] - floor(ts * q[4] / p[4])
          if pel > 0 and st < p[1] then
            if pel >= ceil((p[1] - st) / p[2]) then st = p[1] else st = st + pel * p[2] end
          end
          -- The loans carry in whole tokens: neither reading exceeds C - L.
          local most = p[1] - lent * p[3]
          if st > most then st = most end
          if tok > most then tok = most end
          if st > tok then tok = st end
          stamped[i] = st
        end
      end
      toks[i], aheads[i], owns[i], kept[i], lents[i], lns[i] = tok, ahead, own, q, lent, ln
      local c = n
      if cs then c = cs[i]; if c == 0 then c = 1 end end
      if tok < c * p[3] then allowed = 0 end
    end
    local write, extra = 0, 0
    if op == 1 then
      if allowed == 1 then write = -1 end
    elseif op == 3 then
      allowed, write = 1, 1
    elseif op == 12 then
      -- The loan returned (if still out) gives back its unspent tokens;
      -- then a slice is lent, all or nothing, only when every bucket
      -- holds it whole. allowed: a slice lent, or (none asked) a loan
      -- returned. lend[-i] keeps policy i's tokens as read (see the
      -- write below).
      local back = false
      for i = 1, m do
        lend[-i] = toks[i]
        local ln = lns[i]
        for j = 1, ln and #ln or 0 do
          if ln[j][1] == lend[1] then
            local r = lend[1 + 2 * i]
            if r > ln[j][2] then r = ln[j][2] end
            if r > 0 then toks[i] = toks[i] + r * rp[i][3] end
            lents[i] = lents[i] - ln[j][2]
            table.remove(ln, j)
            back = true
            break
          end
        end
      end
      allowed = 0
      if lend[2] ~= '-' then
        allowed = 1
        for i = 1, m do
          local w = lend[2 + 2 * i]
          if w <= 0 or toks[i] < w * rp[i][3] then allowed = 0 end
        end
        if allowed == 1 then
          for i = 1, m do
            local w = lend[2 + 2 * i]
            toks[i], lents[i] = toks[i] - w * rp[i][3], lents[i] + w
            if not lns[i] then lns[i] = {} end
            local ln = lns[i]
            ln[#ln + 1] = {lend[2], w, now + x}
          end
        end
      elseif back then
        allowed = 1
      end
      if allowed == 1 or back then write = 3 end
    elseif op > 3 then
      allowed, write = 1, 2
      if op == 4 then
        -- Booked when its n tokens exist under every policy within x µs.
        local most = 0
        for i = 1, m do
          local p = rp[i]
          local short = n * p[3] - toks[i]
          if short > 0 then
            local w = ceil(short / p[2]) * p[4] - p[7]
            if w > most then most = w end
          end
        end
        if most > x then allowed, write = 0, 0 else extra = now + most end
      elseif op == 6 and now >= x then
        allowed, write = 0, 0
      end
    end
    for i = 1, m do
      local p, b = rp[i], k + i
      local cap, rate, unit, tick, phase = p[1], p[2], p[3], p[4], p[7]
      local need, wr = n * unit, write
      if cs then
        need = cs[i] * unit
        if need == 0 then need, wr = unit, 0 end
      end
      local left = toks[i]
      local retry, reset = 0, 0
      if wr == -1 then
        left = left - need
      elseif wr == 1 then
        left = left + need
        if left > cap then left = cap end
      elseif wr == 2 then
        left, retry, extra = waiting(op, x, p, n, need, left, extra)
      elseif allowed == 0 and left < need and wr == 0 then
        retry = ceil((need - left) / rate) * tick - phase
      end
      -- With loans out, what may be taken refills to the capacity less L.
      local lu = lents[i] * unit
      if left > cap - lu then left = cap - lu end
      if left < cap then reset = ceil((cap - left) / rate) * tick - phase end
      local q = kept[i]
      if q and q ~= p and wr == 0 and not (op == 1 and aheads[i]) then
        -- Nothing is written: the bucket stays in its own policy q, and
        -- either reading may reach n tokens (or full) first: the one
        -- refilling in q, up to the units that p reads as n tokens, or
        -- the one refilling at p's rate from the stamp.
        local qphase, own, st = q[7], owns[i], stamped[i]
        if allowed == 0 and left < need then
          local x = (cap - need) * q[3]
          if x < 9007199254740992 then x = floor(x / unit) else x = floor((cap - need) / unit * q[3]) end
          if x > q[1] then x = q[1] end
          retry = ceil((q[1] - x - own) / q[2]) * q[4] - qphase
          local rs = ceil((need - st) / rate) * tick - phase
          if rs < retry then retry = rs end
        end
        if left < cap then
          reset = ceil((q[1] - own) / q[2]) * q[4] - qphase
          local rs = ceil((cap - st) / rate) * tick - phase
          if rs < reset then reset = rs end
        end
      end
      -- The request's first policy leads with whether it is allowed; an
      -- allowed request has nothing to wait for.
      local rem = floor(left / unit)
      if rem < 0 then rem = 0 end
      if allowed == 1 and write ~= 2 then
        vals[b] = format(i == 1 and '1,%d,0,%d' or '%d,0,%d', rem, reset)
      elseif allowed == 1 then
        vals[b] = format(i == 1 and '1,%d,%d,%d' or '%d,%d,%d', rem, retry, reset)
      else
        vals[b] = format(i == 1 and '0,%d,%d,%d' or '%d,%d,%d', rem, retry, reset)
      end
      local again = later and later[b]
      if wr ~= 0 or (op == 1 and aheads[i]) then
        local ex, ln = ceil(reset / 1000000) + 1, lns[i]
        local held, w, at = left + lu, p, nil
        if q ~= p and q and wr ~= 0 and (wr ~= -1 and (left < 0 or owns[i] < 0) or select(2, carry(owns[i], q, p))) then
          -- A write that p's units would lose q's spend in: p's reading
          -- clamped at 0 (q spent beyond p's capacity), or for any but a
          -- take, a debt read or left (healed at p's rate, p's debt
          -- would carry as a spend of less than p's capacity). The
          -- bucket stays in q, less what p took (plus what it gave
          -- back; a loan moves tokens within the bucket, a loan
          -- returned gives back what is unspent), at most full, owing
          -- at least what p owes; alive
          -- while either policy reads it short of full. What p has left
          -- it reads from the stamp: the stamp goes back by the ticks
          -- p's refill takes to reach it, and q's units by q's refill
          -- over them, so q reads the same now; no further than q's
          -- units allow.
          -- p's units in q's, rounded down (toward fewer tokens), inline:
          -- a local function costs every call its closure.
          local dq, qu = left - (wr == 3 and lend[-i] or toks[i]), q[3]
          if dq * qu < 9007199254740992 and dq * qu > -9007199254740992 then dq = floor(dq * qu / unit) else dq = floor(dq / unit * qu) end
          held, w = owns[i] + dq, q
          local most = q[1] - lents[i] * qu
          if held > most then held = most end
          if left < 0 then
            if -left * qu < 9007199254740992 then dq = floor(left * qu / unit) else dq = floor(left / unit * qu) end
            if dq < held then held = dq end
          end
          local qx = ceil((ceil((q[1] - held) / q[2]) * q[4] - q[7]) / 1000000) + 1
          if qx > ex then ex = qx end
          if left > 0 and held > 0 then
            local back = q[5] - ceil((p[5] - floor(left / rate)) * tick / q[4])
            local most = floor(held / q[2])
            if back > most then back = most end
            if back > 0 then held, at = held - back * q[2], q[5] - back end
          end
          held = held + lents[i] * q[3]
        end
        if again then U[b], T[b], Q[b], W[b], LN[b] = held, at or w[5], w, ex, ln else put(KEYS[b], ex, held, w, ln, at) end
      elseif from and not again then
        local e = from[b]
        if e and W[e] then put(KEYS[b], W[e], U[e], Q[e], LN[e], T[e]) end
      end
    end
    if op > 3 and op < 12 then vals[k + m] = vals[k + m] .. format(',%d', extra) end
    k = k + m
  end
end
local reply = table.concat(vals, ',', 1, nk - 1)
if wrote then redis.call('SETEX', KEYS[nk], ARGV[1], reply) end
return reply
`
