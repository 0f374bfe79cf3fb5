#!lua
-- Floodgate: the RLQS streams sharing one bucket, fleet-wide. One sorted
-- set per bucket holds each stream's id scored by its last report (ms); a
-- call records or removes one stream, trims the streams silent for longer
-- than the time to live, and answers how many remain. The set expires a
-- time to live after its newest report, so a bucket nobody reports costs
-- nothing.
--
-- KEYS[1]    the bucket's set of streams.
-- ARGV[1]    now in microseconds, or '' to read the server clock (TIME).
-- ARGV[2]    the time to live in ms (at least 1).
-- ARGV[3]    the stream's id.
-- ARGV[4]    '1': the stream reports now; '0': it leaves; '': count only.
--
-- Reply: the streams that reported within the time to live.
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
elseif ARGV[4] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
local n = redis.call('ZCARD', KEYS[1])
if n > 0 and ARGV[4] == '1' then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return n
