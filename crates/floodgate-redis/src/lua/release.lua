#!lua
-- Floodgate: give back units of a concurrency limit.
--
-- KEYS[1]  the state key ('c<held>').
-- ARGV[1]  the units to give back.
--
-- Reply: the units still held. A key that holds anything else is left
-- alone (as the in-memory store does for a limit of another kind); the key
-- is deleted when nothing is held any more.

local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local held = tonumber(string.match(v, '^c(%d+)$'))
if not held or held >= 9007199254740992 then
  return 0
end
held = math.max(held - tonumber(ARGV[1]), 0)
if held == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], string.format('c%d', held), 'KEEPTTL')
end
return held
