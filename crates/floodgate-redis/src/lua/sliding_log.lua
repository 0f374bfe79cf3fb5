-- Part of the decision script (see prelude.lua).

-- Sliding log. State 'l' .. low .. records, packed big-endian doubles: `low`
-- numbers the units dropped so far, and each record (time, cum) says that
-- the units up to number `cum` arrived at `time` (times and cums increase).
local log_parse, rec, first_after, first_cum, sliding_log
if need.l then
  log_parse = function(v)
    local len = string.len(v)
    if string.sub(v, 1, 1) ~= 'l' or len < 9 or (len - 9) % 16 ~= 0 then
      return false
    end
    local low = struct.unpack('>d', v, 2)
    if low ~= low or low < 0 or low >= TWO53 then
      return false
    end
    return { v, (len - 9) / 16, low }
  end

  rec = function(s, i)
    return struct.unpack('>d>d', s, 10 + 16 * i)
  end

  -- The first record index in [lo, n) whose time is after `t` (or n).
  first_after = function(s, lo, n, t)
    local hi = n
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if rec(s, mid) > t then
        hi = mid
      else
        lo = mid + 1
      end
    end
    return lo
  end

  -- The first record index in [lo, n) whose cum is at least `u` (or n).
  first_cum = function(s, lo, n, u)
    local hi = n
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      local _, c = rec(s, mid)
      if c >= u then
        hi = mid
      else
        lo = mid + 1
      end
    end
    return lo
  end

  sliding_log = function(it, st, apply, now)
    local L, W, cost = it.L, it.W, it.cost
    local s, n, low = '', 0, 0
    if st then
      s, n, low = st[1], st[2], st[3]
    end
    local b = first_after(s, 0, n, now - W)
    local base = low
    if b > 0 then
      local _, c = rec(s, b - 1)
      base = math.max(low, c)
    end
    local total = low
    if n > 0 then
      local _, c = rec(s, n - 1)
      total = c
    end
    local held = total - base
    local o, new, idle = NEVER, nil, nil
    if cost <= L then
      local fits = held + cost <= L
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        local at = now
        if b < n then
          at = math.max(rec(s, n - 1), now)
        end
        local ntotal = total + math.min(cost, L)
        local nlow = math.max(base, ntotal - L)
        local k = first_cum(s, b, n, nlow + 1)
        local stop = n
        if stop > k and rec(s, n - 1) == at then
          stop = n - 1
        end
        local body = ''
        if stop > k then
          body = string.sub(s, 10 + 16 * k, 9 + 16 * stop)
        end
        if ntotal > TWO51 then
          -- Renumber the units from 0 (once in a very long while).
          local parts = {}
          for i = k, stop - 1 do
            local t, c = rec(s, i)
            parts[#parts + 1] = struct.pack('>d>d', t, c - nlow)
          end
          body = table.concat(parts)
          ntotal = ntotal - nlow
          nlow = 0
        end
        s = 'l' .. struct.pack('>d', nlow) .. body .. struct.pack('>d>d', at, ntotal)
        n = (stop - k) + 1
        b, base, total, held = 0, nlow, ntotal, ntotal - nlow
        new, idle = s, at + W
      end
    end
    local retry = -1
    if o == DENIED then
      local i = first_cum(s, b, n, base + held + cost - L)
      retry = rec(s, i) + W - now
    end
    local reset = 0
    if held > 0 then
      reset = rec(s, n - 1) + W - now
    end
    return o, L, math.max(L - held, 0), reset, retry, 0, new, idle
  end
end
