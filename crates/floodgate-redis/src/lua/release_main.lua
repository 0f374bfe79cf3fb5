-- Part of the release script (see release.lua).

local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local ps = permits_parse(v)
if not ps then
  return 0
end
if ps.legacy then
  return 0
end

local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end
local units, id = tonumber(ARGV[1]), ARGV[2]

local live, _, _, changed = permits_live(ps, now, 0)
-- A permit of a limit with its own lease may hold several entries (one
-- per charge): the earliest given back first.
local given = 0
for j, p in ipairs(live) do
  if given == units then
    break
  end
  if p[1] == id then
    local n = math.min(units - given, p[2])
    live[j] = { id, p[2] - n, p[3] }
    given = given + n
    changed = true
  end
end
if given == 0 then
  return 0
end

local last
live, _, last = permits_live(live, now, 0)
if #live == 0 then
  redis.call('DEL', KEYS[1])
  return given
end
local value = permits_value(live)
if not last then
  redis.call('SET', KEYS[1], value)
elseif ARGV[4] == '' then
  redis.call('SET', KEYS[1], value, 'PXAT', math.floor((last + 999) / 1000))
else
  local ms = math.floor((last - now + 999) / 1000)
  redis.call('SET', KEYS[1], value, 'PX', math.max(ms, 1) + tonumber(ARGV[4]))
end
return given
