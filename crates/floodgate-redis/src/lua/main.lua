-- Part of the decision script (see prelude.lua): dispatch, the two
-- phases of a batch, and the writes.

local function parse(it, v)
  local kind = it.kind
  if kind == 'f' then
    return fixed_parse(v)
  elseif kind == 'g' then
    return gcra_parse(v, it)
  elseif kind == 'w' or kind == 'n' then
    return windows_parse(v, it)
  elseif kind == 'l' then
    return log_parse(v)
  elseif kind == 's' then
    return shaper_parse(v)
  end
  return conc_parse(v)
end

-- Returns outcome, limit, remaining, reset_us, retry_us, delay_ms, and when
-- the state changed its new value and idle instant (false: none).
local function decide(it, a, now)
  local kind = it.kind
  if kind == 'f' then
    return fixed(it, it.st, a, now)
  elseif kind == 'g' then
    return gcra(it, it.st, a, now)
  elseif kind == 'w' or kind == 'n' then
    return windows(it, it.st, a, now)
  elseif kind == 'l' then
    return sliding_log(it, it.st, a, now)
  elseif kind == 's' then
    return shaper(it, it.st, a, now)
  end
  return concurrency(it, it.st, a)
end

local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end

local resets = 0
for i = 1, n do
  local it = items[i]
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' then
    resets = resets + 1
  elseif v then
    local st = parse(it, v)
    if st == false then
      resets = resets + 1
    else
      it.st = st
    end
  end
end

-- Check every item first (stopping at the first refusal), then decide each
-- with what the outcome allows: all charged, or none (penalty excepted). A
-- single item needs no separate check: its own decision is check-then-charge.
local mode = apply
if n > 1 and (apply == 1 or apply == 2) then
  for i = 1, n do
    local o = decide(items[i], 0, now)
    if o ~= ALLOWED and o ~= DELAYED then
      mode = (apply == 2) and 2 or 3
      break
    end
  end
end

local reply = { now, resets }
local r = 2
for i = 1, n do
  local it = items[i]
  local a = mode
  if it.penalty and (a == 1 or a == 3) then
    a = 2
  end
  local o, limit, remaining, reset, retry, delay, v, idle = decide(it, a, now)
  reply[r + 1], reply[r + 2], reply[r + 3] = o, limit, remaining
  reply[r + 4], reply[r + 5], reply[r + 6] = reset, retry, delay
  r = r + 6
  it.v, it.idle = v, idle
end

local slack, lease = ARGV[3], tonumber(ARGV[4])
for i = 1, n do
  local it = items[i]
  local v, idle = it.v, it.idle
  if not v then
    -- Unchanged: nothing to write.
  elseif not idle then
    if lease > 0 then
      redis.call('SET', KEYS[i], v, 'PX', lease)
    else
      redis.call('SET', KEYS[i], v)
    end
  elseif slack == '' then
    redis.call('SET', KEYS[i], v, 'PXAT', floor((idle + 999) / 1000))
  else
    local ms = floor((idle - now + 999) / 1000)
    redis.call('SET', KEYS[i], v, 'PX', math.max(ms, 1) + tonumber(slack))
  end
end

return reply
