#!lua
-- Floodgate: the RLQS streams sharing one bucket, fleet-wide. One sorted
-- set per bucket holds each stream's id scored by its last report (ms),
-- and a hash beside it each stream's use as of that report; a call records
-- or removes one stream, trims the streams silent for longer than the time
-- to live, and answers the use of each that remains. Both expire a time to
-- live after the newest report, so a bucket nobody reports costs nothing.
--
-- KEYS[1]    the bucket's set of streams.
-- KEYS[2]    the streams' use (a hash; the same hash tag as KEYS[1]).
-- ARGV[1]    now in microseconds, or '' to read the server clock (TIME).
-- ARGV[2]    the time to live in ms (at least 1).
-- ARGV[3]    the stream's id.
-- ARGV[4]    '1': the stream reports now; '0': it leaves; '': read only.
-- ARGV[5]    the stream's use (digits), or '' when unknown.
--
-- Reply: per stream that reported within the time to live, its use ('':
-- unknown).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = math.floor(tonumber(ARGV[1]) / 1000)
end
local ttl = tonumber(ARGV[2])
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[5])
elseif ARGV[4] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[3])
  redis.call('HDEL', KEYS[2], ARGV[3])
end
local cut = '(' .. (now - ttl)
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cut)
if #silent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut)
  redis.call('HDEL', KEYS[2], unpack(silent))
end
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if #members == 0 then
  return {}
end
if ARGV[4] == '1' then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local usages = redis.call('HMGET', KEYS[2], unpack(members))
for i = 1, #usages do
  if not usages[i] then
    usages[i] = ''
  end
end
return usages
