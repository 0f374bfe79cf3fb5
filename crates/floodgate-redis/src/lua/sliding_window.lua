-- Part of the decision script (see prelude.lua).

-- Sliding window counter. State '<w|n><start>:<c0>:...:<cN>': the start of
-- the current sub-window and the N + 1 counts, oldest first.
local windows_parse, windows
if need.w or need.n then
  windows_parse = function(v, it)
    if string.sub(v, 1, 1) ~= it.kind then
      return false
    end
    local nums = {}
    for part in string.gmatch(string.sub(v, 2), '[^:]+') do
      local x = int(part)
      if not x or x < 0 or x ~= floor(x) then
        return false
      end
      nums[#nums + 1] = x
    end
    if #nums ~= it.N + 2 then
      return false
    end
    local counts = {}
    for i = 2, #nums do
      counts[i - 1] = nums[i]
    end
    return { nums[1], counts }
  end

  windows = function(it, st, apply, now)
    local L, S, cost, len = it.L, it.S, it.cost, it.N + 1
    local start, counts = 0, {}
    if st then
      start, counts = st[1], st[2]
    else
      for i = 1, len do
        counts[i] = 0
      end
    end
    local _, r = divmod(now, S)
    local current, gone = now - r, 0
    if current > start then
      gone = math.min(floor((current - start) / S), len)
    else
      current = start
    end
    local e = math.max(now, current) - current
    -- The visible counts are counts[gone + 1 .. len].
    local function parts(from)
      local oldest, rest = counts[from] or 0, 0
      for i = from + 1, len do
        rest = rest + counts[i]
      end
      return oldest, rest
    end
    -- Before a charge or a refund: the counts moved to the current
    -- sub-window, every one visible.
    local function advance()
      if current > start then
        local shifted = {}
        for i = 1, len do
          shifted[i] = counts[i + gone] or 0
        end
        counts, start = shifted, current
      end
      gone = 0
    end
    local o, charged = NEVER, false
    local any = false
    for i = gone + 1, len do
      any = any or counts[i] > 0
    end
    if apply == 7 then
      -- A refund: the newest counts give back first, none below 0.
      o = ALLOWED
      if cost > 0 and any then
        charged = true
        advance()
        local left = cost
        for i = len, 1, -1 do
          local take = math.min(left, counts[i])
          counts[i], left = counts[i] - take, left - take
        end
      end
    elseif cost <= L then
      local fits = true
      if cost > 0 then
        local oldest, rest = parts(gone + 1)
        local room = L - rest - cost
        fits = room >= 0 and ceil_muldiv(oldest, S - e, S) <= room
      end
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        charged = true
        advance()
        counts[len] = counts[len] + cost
        if it.kind == 'w' then
          -- The two-window state holds 32-bit counts, and decides with them.
          counts[len] = math.min(counts[len], U32)
        end
      end
    end
    local retry = -1
    if o == DENIED then
      local vis = len - gone
      for k = 0, vis do
        local oldest, rest = parts(gone + 1 + k)
        local room = L - rest - cost
        if room >= 0 then
          local x = 0
          if oldest > room then
            x = S - muldiv(room, S, oldest)
          end
          if k == 0 and x < e then
            x = e
          end
          if x < S then
            retry = k * S + x - e
            break
          end
        end
      end
      if retry < 0 then
        retry = (vis + 1) * S - e
      end
    end
    local oldest, rest = parts(gone + 1)
    local remaining = math.max(L - rest - ceil_muldiv(oldest, S - e, S), 0)
    local reset = 0
    for i = len, gone + 1, -1 do
      if counts[i] ~= 0 then
        reset = (i - gone) * S - e
        break
      end
    end
    if not charged then
      return o, L, remaining, reset, retry, 0
    end
    local cap = (it.kind == 'w') and U32 or TWO51
    local out, idle = {}, start
    for i = 1, len do
      local c = math.min(counts[i], cap)
      out[i] = format('%d', c)
      if c ~= 0 then
        idle = start + i * S
      end
    end
    return o, L, remaining, reset, retry, 0, it.kind .. format('%d', start) .. ':' .. table.concat(out, ':'), idle
  end
end
