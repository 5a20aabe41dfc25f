-- A stub of the Redis scripting environment, enough for this package's
-- scripts: a redis table whose call runs the commands they use on an
-- in-memory keyspace, a clock the caller sets, and run, which runs a
-- script's source as Redis would (KEYS and ARGV globals, a shebang line
-- dropped) and formats its reply as Redis converts it (a number
-- truncated to an integer, false as nil, a table as an array). It runs
-- under Lua 5.1 (Redis's) and 5.4 (Dragonfly's), so that a script that
-- depends on one version shows it. Expiry is recorded, never applied.

local load = loadstring or load
local unpack = table.unpack or unpack

local strings, zsets, ttls = {}, {}, {}
local sec, usec = 0, 0

stub = {}

-- stub.time sets the clock TIME reads.
function stub.time(s, us) sec, usec = s, us end

-- stub.advance moves the clock by us microseconds.
function stub.advance(us)
  usec = usec + us
  sec, usec = sec + math.floor(usec / 1000000), usec % 1000000
end

local function int(x) return math.floor(tonumber(x)) end

local function zsorted(key)
  local z, out = zsets[key] or {}, {}
  for m, s in pairs(z) do out[#out + 1] = {m, s} end
  table.sort(out, function(a, b) if a[2] ~= b[2] then return a[2] < b[2] end return a[1] < b[1] end)
  return out
end

local function score(s)
  if s == '-inf' then return -math.huge elseif s == '+inf' then return math.huge end
  return tonumber(s)
end

-- The score as Redis formats it: an integer score without a point.
local function fmtScore(s) return string.format('%.17g', s) end

local commands = {}
function commands.TIME() return {tostring(sec), tostring(usec)} end
function commands.GET(k) return strings[k] or false end
function commands.MGET(...)
  local out = {}
  for i, k in ipairs({...}) do out[i] = strings[k] or false end
  return out
end
function commands.SETEX(k, ex, v)
  assert(int(ex) > 0, 'ERR invalid expire time in \'setex\' command')
  strings[k], ttls[k] = tostring(v), int(ex) * 1000
  return {ok = 'OK'}
end
function commands.PTTL(k)
  if strings[k] == nil and zsets[k] == nil then return -2 end
  return ttls[k] or -1
end
function commands.PEXPIRE(k, ms)
  assert(tostring(ms):match('^%d+$'), 'ERR value is not an integer or out of range')
  if strings[k] == nil and zsets[k] == nil then return 0 end
  ttls[k] = int(ms)
  return 1
end
function commands.ZADD(k, ...)
  local args, xx = {...}, false
  if args[1] == 'XX' then xx = true; table.remove(args, 1) end
  zsets[k] = zsets[k] or {}
  local added = 0
  for i = 1, #args, 2 do
    local s, m = score(args[i]), args[i + 1]
    assert(s, 'ERR value is not a valid float')
    if zsets[k][m] == nil then
      if not xx then zsets[k][m] = s; added = added + 1 end
    else
      zsets[k][m] = s
    end
  end
  if next(zsets[k]) == nil then zsets[k] = nil end
  return added
end
function commands.ZSCORE(k, m)
  local s = zsets[k] and zsets[k][m]
  if s == nil then return false end
  return fmtScore(s)
end
function commands.ZCARD(k)
  local n = 0
  for _ in pairs(zsets[k] or {}) do n = n + 1 end
  return n
end
function commands.ZREM(k, m)
  if zsets[k] and zsets[k][m] then
    zsets[k][m] = nil
    if next(zsets[k]) == nil then zsets[k] = nil end
    return 1
  end
  return 0
end
function commands.ZREMRANGEBYSCORE(k, lo, hi)
  local n = 0
  for _, e in ipairs(zsorted(k)) do
    if e[2] >= score(lo) and e[2] <= score(hi) then commands.ZREM(k, e[1]); n = n + 1 end
  end
  return n
end
function commands.ZRANGE(k, from, to, withscores)
  local all, out = zsorted(k), {}
  from, to = int(from), int(to)
  if from < 0 then from = #all + from end
  if to < 0 then to = #all + to end
  for i = from + 1, math.min(to + 1, #all) do
    out[#out + 1] = all[i][1]
    if withscores then out[#out + 1] = fmtScore(all[i][2]) end
  end
  return out
end

-- Arguments reach Redis as strings, numbers included (as Redis's Lua
-- converts them: integers without a point).
local function toArg(v)
  if type(v) == 'number' then
    assert(v == math.floor(v), 'a fractional number argument: ' .. tostring(v))
    return string.format('%d', v)
  end
  return v
end

redis = {}
function redis.call(cmd, ...)
  local f = commands[cmd]
  assert(f, 'the stub lacks ' .. tostring(cmd))
  local args = {...}
  for i = 1, select('#', ...) do args[i] = toArg(args[i]) end
  return f(unpack(args, 1, select('#', ...)))
end

-- reply formats v as Redis converts a script's return value.
local function reply(v)
  local t = type(v)
  if t == 'number' then
    if v >= 0 then return string.format('%d', math.floor(v)) end
    return string.format('%d', math.ceil(v))
  elseif t == 'string' then
    return string.format('%q', v)
  elseif t == 'table' then
    if v.ok then return v.ok end
    local parts = {}
    for i = 1, #v do parts[i] = reply(v[i]) end
    return '[' .. table.concat(parts, ' ') .. ']'
  elseif v == true then
    return '1'
  end
  return 'nil'
end

-- run runs src with keys and argv, and returns its reply as text, or the
-- error it raised.
function run(src, keys, argv)
  src = src:gsub('^#![^\n]*', '', 1)
  local f, err = load(src, '=script')
  if not f then return 'error: ' .. err end
  KEYS, ARGV = keys, argv
  local ok, v = pcall(f)
  if not ok then return 'error: ' .. tostring(v) end
  return reply(v)
end
