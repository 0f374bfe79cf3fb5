-- Shared by the decision, lease and sync scripts (see prelude.lua):
-- constants and integer helpers.

local floor = math.floor
local TWO51 = 2251799813685248
local TWO52 = 4503599627370496
local TWO53 = 9007199254740992
local ALLOWED, DELAYED, DENIED, NEVER = 0, 1, 2, 3
local U32 = 4294967295

local format = string.format

-- Exact floor(a / b) and a mod b for integers 0 <= a < 2^53, 0 < b.
local function divmod(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

-- A stored integer, or nil when it is not one below 2^53.
local function int(s)
  local x = tonumber(s)
  if x and x < TWO53 then
    return x
  end
  return nil
end

-- Whether a decision with `apply` charges the cost. Besides the call's own
-- codes, 4 charges only a denial (a request another limit denied, under a
-- limit that counts its own denials).
local function charges(apply, allowed)
  if allowed then
    return apply == 1 or apply == 2
  end
  return apply == 2 or apply == 4
end

-- The time of the call: ARGV value `arg` in microseconds, or the server's
-- clock (TIME) when it is ''.
local function clock(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(arg)
end

-- Writes a key's new value `v` ('' deletes it), expiring at `idle` (µs;
-- false: never): absolutely with the server's clock (`slack` ''),
-- otherwise relative to `now` plus `slack` ms.
local function write_state(key, v, idle, now, slack)
  if v == '' then
    -- Nothing left (a concurrency state whose permits all ended).
    redis.call('DEL', key)
  elseif not idle then
    -- Never idle by itself (permits held until released).
    redis.call('SET', key, v)
  elseif slack == '' then
    redis.call('SET', key, v, 'PXAT', floor((idle + 999) / 1000))
  else
    local ms = floor((idle - now + 999) / 1000)
    redis.call('SET', key, v, 'PX', math.max(ms, 1) + tonumber(slack))
  end
end
