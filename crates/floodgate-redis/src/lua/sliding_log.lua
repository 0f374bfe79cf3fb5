-- Part of the decision script (see prelude.lua).

-- Sliding log. State 'l' .. low .. records, packed big-endian doubles: `low`
-- numbers the units dropped so far, and each record (time, cum) says that
-- the units up to number `cum` arrived at `time` (times and cums increase).
local log_parse, rec, first_after, first_cum, sliding_log
if need.l then
  -- Every record is checked (the searches below rely on the order, and
  -- a NaN would compare false everywhere): times finite, counts integers
  -- below 2^53, both non-negative and non-decreasing, the last count at
  -- least `low`. Anything else is garbage: the key is reset. Records are
  -- read four at a time (one call instead of four: the check is most of
  -- the cost of reading a long log). The comparisons are written so that
  -- a NaN fails them; non-decreasing columns are finite and below 2^53
  -- when their last value is.
  log_parse = function(v)
    local len = string.len(v)
    if string.sub(v, 1, 1) ~= 'l' or len < 9 or (len - 9) % 16 ~= 0 then
      return false
    end
    local low = struct.unpack('>d', v, 2)
    if not (low >= 0 and low < TWO53 and low % 1 == 0) then
      return false
    end
    local n = (len - 9) / 16
    local unpack = struct.unpack
    local t, c, pos, i = 0, 0, 10, 0
    while i + 4 <= n do
      local t1, c1, t2, c2, t3, c3, t4, c4
      t1, c1, t2, c2, t3, c3, t4, c4, pos = unpack('>dddddddd', v, pos)
      if not (t1 >= t and t2 >= t1 and t3 >= t2 and t4 >= t3
          and c1 >= c and c2 >= c1 and c3 >= c2 and c4 >= c3
          and c1 % 1 == 0 and c2 % 1 == 0 and c3 % 1 == 0 and c4 % 1 == 0) then
        return false
      end
      t, c, i = t4, c4, i + 4
    end
    while i < n do
      local t1, c1
      t1, c1, pos = unpack('>dd', v, pos)
      if not (t1 >= t and c1 >= c and c1 % 1 == 0) then
        return false
      end
      t, c, i = t1, c1, i + 1
    end
    if not (t < math.huge and c < TWO53 and (n == 0 or c >= low)) then
      return false
    end
    return { v, n, low }
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

  -- The first record index in [lo, n) whose cum is at least `u` (or n:
  -- callers that read the record found make sure one has such a cum).
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
      -- A denial holds units (held > 0, so n > 0), the last record's cum
      -- is `total`, at least the target: i < n. Never read past the end
      -- all the same.
      local i = math.min(first_cum(s, b, n, base + held + cost - L), n - 1)
      retry = rec(s, i) + W - now
    end
    local reset = 0
    if held > 0 then
      reset = rec(s, n - 1) + W - now
    end
    return o, L, math.max(L - held, 0), reset, retry, 0, new, idle
  end
end
