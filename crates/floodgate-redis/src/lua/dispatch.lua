-- Shared by the decision, lease and sync scripts (see prelude.lua): the
-- algorithms by kind, and reading the keys' states. Every kind is named:
-- read_item.lua refuses any other, so a kind missing here is an error, not
-- another algorithm.

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
  elseif kind == 'c' then
    return conc_parse(v)
  end
  error('floodgate: no algorithm for kind ' .. kind)
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
  elseif kind == 'f' or kind == 'w' or kind == 'n' or kind == 'l' then
    return it.L
  end
  error('floodgate: no quota for kind ' .. kind)
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
  elseif kind == 'c' then
    return concurrency(it, it.st, a, now)
  end
  error('floodgate: no algorithm for kind ' .. kind)
end

-- Reads every item's key: `it.st` is its parsed state (nil for a fresh
-- key), `it.blocked` the end of a block in force. Returns how many keys
-- held something that is not a state of their item's kind (treated as
-- fresh, overwritten by the next charge).
local function read_states(items, n, now)
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
          -- The value too: a state to decide on again is parsed again
          -- (the algorithms may change the tables they decide on).
          it.st, it.raw = st, v
        end
      end
    end
  end
  return resets
end
