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

-- The quota a decision reports as `limit`.
local function quota(it)
  local kind = it.kind
  if kind == 'g' then
    return it.B
  elseif kind == 's' then
    return floor(it.B / 1000) + 1
  elseif kind == 'c' then
    return it.M
  end
  return it.L
end

-- Returns outcome, limit, remaining, reset_us, retry_us, delay_ms, and when
-- the state changed its new value ('': none left, the key goes) and idle
-- instant (false: none). A blocked key is denied until its block ends (a
-- cost that can never fit, above the quota, is never admitted), and is left
-- as it is.
local function decide(it, a, now)
  if it.blocked then
    local wait, q = it.blocked - now, quota(it)
    if it.cost > q then
      return NEVER, q, 0, wait, -1, 0
    end
    return DENIED, q, 0, wait, wait, 0
  end
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
  return concurrency(it, it.st, a, now)
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
    if string.byte(v, 1) == 98 then
      -- 'b<until>': blocked until then, a fresh key afterwards.
      local u = int(string.match(v, '^b(%d+)$'))
      if not u then
        resets = resets + 1
      elseif u > now then
        it.blocked = u
      end
    else
      local st = parse(it, v)
      if st == false then
        resets = resets + 1
      else
        it.st = st
      end
    end
  end
end

-- Check every item first (stopping at the first refusal), then decide each
-- with what the outcome allows: all charged, or none (penalty excepted). A
-- single item needs no separate check: its own decision is check-then-charge.
-- Penalty 2 charges every denied request (commit and rejected become
-- force); penalty 1 charges the requests the limit itself denies (commit
-- becomes force, rejected charges only the limit's own denial: 4). A limit
-- with a block that denies a request (except in a dry run) blocks the key:
-- its state is replaced by 'b<until>', which expires when the block ends.
-- Neither applies to a concurrency limit, which never charges a rejected
-- request (even a forced one) and is never blocked: units it did not admit
-- would never be given back, and its count must outlive any block.
local mode, rejected = apply, apply == 3
if n > 1 and (apply == 1 or apply == 2) then
  for i = 1, n do
    local o = decide(items[i], 0, now)
    if o ~= ALLOWED and o ~= DELAYED then
      mode, rejected = (apply == 2) and 2 or 3, true
      break
    end
  end
end

local reply = { now, resets }
local r = 2
for i = 1, n do
  local it = items[i]
  local a, p = mode, it.penalty
  if it.kind == 'c' then
    p = 0
    if rejected then
      a = 3
    end
  end
  if p == 2 and (a == 1 or a == 3) then
    a = 2
  elseif p == 1 then
    if a == 1 then
      a = 2
    elseif a == 3 then
      a = 4
    end
  end
  local o, limit, remaining, reset, retry, delay, v, idle = decide(it, a, now)
  if o == DENIED and it.block > 0 and it.kind ~= 'c' and mode ~= 0 and not it.blocked then
    local u = now + it.block
    remaining, reset, retry, delay = 0, it.block, it.block, 0
    v, idle = 'b' .. format('%d', u), u
  end
  reply[r + 1], reply[r + 2], reply[r + 3] = o, limit, remaining
  reply[r + 4], reply[r + 5], reply[r + 6] = reset, retry, delay
  r = r + 6
  it.v, it.idle = v, idle
end

local slack = ARGV[3]
for i = 1, n do
  local it = items[i]
  local v, idle = it.v, it.idle
  if not v then
    -- Unchanged: nothing to write.
  elseif v == '' then
    -- Nothing left (a concurrency state whose permits all ended).
    redis.call('DEL', KEYS[i])
  elseif not idle then
    -- Never idle by itself (permits held until released).
    redis.call('SET', KEYS[i], v)
  elseif slack == '' then
    redis.call('SET', KEYS[i], v, 'PXAT', floor((idle + 999) / 1000))
  else
    local ms = floor((idle - now + 999) / 1000)
    redis.call('SET', KEYS[i], v, 'PX', math.max(ms, 1) + tonumber(slack))
  end
end

return reply
