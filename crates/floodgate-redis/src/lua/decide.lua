#!lua
-- Floodgate: one atomic rate limiting decision over the keys of one hash slot.
--
-- KEYS[i]    the state key of item i (distinct: duplicates are merged by the
--            client, which adds up their costs).
-- ARGV[1]    apply: 0 check, 1 commit, 2 force (penalty), 3 rejected.
-- ARGV[2]    now in microseconds, or '' to read the server clock (TIME).
-- ARGV[3]    '' to expire keys at their absolute idle instant (server clock);
--            otherwise a slack in ms added to a relative expiry (client time).
-- ARGV[4]    concurrency lease in ms (0: permits never expire).
-- ARGV[5..]  per item: kind, cost, penalty (0/1), then the kind's parameters,
--            all precomputed by the client as integers below 2^53:
--   g  GCRA          P C B Wq Wr Nq Nr  (T = P/C us; B*P = Wq*C + Wr;
--                                        cost*P = Nq*C + Nr)
--   f  fixed window  L W
--   w  two windows   L S                (counts saturate at 2^32 - 1)
--   n  sub-windows   L S N
--   l  sliding log   L W
--   s  shaper        R B D E            (milli-requests; D = -1: nodelay;
--                                        E: the largest excess kept)
--   c  concurrency   M
--
-- Reply: {now, resets, then per item: outcome, limit, remaining, reset_us,
-- retry_us (-1: none), delay_ms}; outcome 0 allowed, 1 delayed, 2 denied,
-- 3 never. `resets` counts keys that held something other than a state of
-- the item's kind (another type, or garbage): they are treated as fresh and
-- overwritten on the next charge.
--
-- Every number is an integer below 2^53, so Lua's doubles are exact; the
-- products that could exceed 2^53 go through muldiv. All reads and all
-- decisions happen before the first write.

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

local function charges(apply, allowed)
  if allowed then
    return apply == 1 or apply == 2
  end
  return apply == 2
end

local apply = tonumber(ARGV[1])
local n = #KEYS

-- Read the items: one table per item, built by one constructor with exactly
-- its kind's fields. Only the functions of the kinds present are created
-- below (closures are created on every call, so that saves time).
local items, pos = {}, 5
local need = {}
for i = 1, n do
  local kind, a = ARGV[pos], pos + 3
  local cost, penalty = tonumber(ARGV[pos + 1]), ARGV[pos + 2] == '1'
  local it
  if kind == 'f' or kind == 'l' then
    it = { kind = kind, cost = cost, penalty = penalty, L = tonumber(ARGV[a]), W = tonumber(ARGV[a + 1]) }
    pos = a + 2
  elseif kind == 'g' then
    it = {
      kind = kind, cost = cost, penalty = penalty,
      P = tonumber(ARGV[a]), C = tonumber(ARGV[a + 1]), B = tonumber(ARGV[a + 2]),
      Wq = tonumber(ARGV[a + 3]), Wr = tonumber(ARGV[a + 4]),
      Nq = tonumber(ARGV[a + 5]), Nr = tonumber(ARGV[a + 6]),
    }
    pos = a + 7
  elseif kind == 'w' then
    it = { kind = kind, cost = cost, penalty = penalty, L = tonumber(ARGV[a]), S = tonumber(ARGV[a + 1]), N = 1 }
    pos = a + 2
  elseif kind == 'n' then
    it = {
      kind = kind, cost = cost, penalty = penalty,
      L = tonumber(ARGV[a]), S = tonumber(ARGV[a + 1]), N = tonumber(ARGV[a + 2]),
    }
    pos = a + 3
  elseif kind == 's' then
    it = {
      kind = kind, cost = cost, penalty = penalty,
      R = tonumber(ARGV[a]), B = tonumber(ARGV[a + 1]), D = tonumber(ARGV[a + 2]), E = tonumber(ARGV[a + 3]),
    }
    pos = a + 4
  elseif kind == 'c' then
    it = { kind = kind, cost = cost, penalty = penalty, M = tonumber(ARGV[a]) }
    pos = a + 1
  else
    return redis.error_reply('floodgate: unknown limit kind')
  end
  need[kind] = true
  items[i] = it
end

-- Exact floor(a * b / c) and (a * b) mod c for integers a, b < 2^53,
-- 0 < c <= 2^52, when the quotient is below 2^53.
local muldiv, ceil_muldiv
if need.g or need.w or need.n or need.s then
  muldiv = function(a, b, c)
    local p = a * b
    if p < TWO53 then
      return divmod(p, c)
    end
    local bq, br = divmod(b, c)
    local bits, n, x = {}, 0, a
    while x > 0 do
      local bit = x % 2
      n = n + 1
      bits[n] = bit
      x = (x - bit) / 2
    end
    local q, r = 0, 0
    for i = n, 1, -1 do
      q = q * 2
      r = r * 2
      if r >= c then
        r = r - c
        q = q + 1
      end
      if bits[i] == 1 then
        r = r + br
        if r >= c then
          r = r - c
          q = q + 1
        end
      end
    end
    return q + a * bq, r
  end

  ceil_muldiv = function(a, b, c)
    local q, r = muldiv(a, b, c)
    if r > 0 then
      return q + 1
    end
    return q
  end
end

-- GCRA. State: the theoretical arrival time TAT = ti + tf/C microseconds,
-- stored as 'g<ti>' or 'g<ti>:<tf>:<C>'.
local gcra_parse, gcra_until, gcra
if need.g then
  gcra_parse = function(v, it)
    local ti, tf, c = string.match(v, '^g(%d+):(%d+):(%d+)$')
    if ti then
      ti, tf, c = int(ti), int(tf), int(c)
      if not (ti and tf and c) or ti >= TWO52 then
        return false
      end
      if c ~= it.C or tf >= c then
        -- Another rate: round up to the next whole microsecond (never early).
        return { ti + 1, 0 }
      end
      return { ti, tf }
    end
    ti = int(string.match(v, '^g(%d+)$'))
    if ti and ti <= TWO52 then
      return { ti, 0 }
    end
    return false
  end

  gcra_until = function(ai, af, now)
    if ai > now then
      return ai - now + ((af > 0) and 1 or 0)
    elseif ai == now and af > 0 then
      return 1
    end
    return 0
  end

  gcra = function(it, st, apply, now)
    local C, P, cost = it.C, it.P, it.cost
    local bi, bf = now, 0
    if st and (st[1] > now or (st[1] == now and st[2] > 0)) then
      bi, bf = st[1], st[2]
    end
    local li, lf = now + it.Wq, it.Wr
    local o, ai, af, retry, new = NEVER, bi, bf, -1, nil
    if cost <= it.B then
      local xi, xf = bi + it.Nq, bf + it.Nr
      if xf >= C then
        xf = xf - C
        xi = xi + 1
      end
      if xi > TWO52 then
        xi, xf = TWO52, 0
      end
      local fits = cost == 0 or xi < li or (xi == li and xf <= lf)
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        ai, af = xi, xf
        new = { xi, xf }
      end
      if not fits then
        local ti, tf = ai + it.Nq - it.Wq, af + it.Nr - it.Wr
        if tf >= C then
          tf = tf - C
          ti = ti + 1
        elseif tf < 0 then
          tf = tf + C
          ti = ti - 1
        end
        retry = gcra_until(ti, tf, now)
      end
    end
    local remaining = 0
    if li > ai or (li == ai and lf > af) then
      local di, df = li - ai, lf - af
      if df < 0 then
        df = df + C
        di = di - 1
      end
      local q1, r1 = muldiv(di, C, P)
      remaining = q1 + divmod(r1 + df, P)
    end
    local reset = gcra_until(ai, af, now)
    if not new then
      return o, it.B, remaining, reset, retry, 0
    end
    local v
    if new[2] == 0 then
      v = 'g' .. format('%d', new[1])
    else
      v = 'g' .. format('%d', new[1]) .. ':' .. format('%d', new[2]) .. ':' .. format('%d', C)
    end
    return o, it.B, remaining, reset, retry, 0, v, new[1] + ((new[2] > 0) and 1 or 0)
  end
end

-- Fixed window. State 'f<start>:<count>': the window's start and its count.
local fixed_parse, fixed
if need.f then
  fixed_parse = function(v)
    local s, c = string.match(v, '^f(%d+):(%d+)$')
    s, c = int(s), int(c)
    if s and c then
      return { s, c }
    end
    return false
  end

  fixed = function(it, st, apply, now)
    local L, W, cost = it.L, it.W, it.cost
    local _, r = divmod(now, W)
    local start, count = now - r, 0
    if st and st[1] >= start then
      start, count = st[1], st[2]
    end
    local stop = W - (math.max(now, start) - start)
    local o, retry, charged = NEVER, -1, false
    if cost <= L then
      local fits = cost == 0 or count + cost <= L
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        count = math.min(count + cost, TWO52)
        charged = true
      end
      if not fits then
        retry = stop
      end
    end
    local remaining, reset = math.max(L - count, 0), (count == 0) and 0 or stop
    if charged then
      return o, L, remaining, reset, retry, 0, 'f' .. format('%d', start) .. ':' .. format('%d', count), start + W
    end
    return o, L, remaining, reset, retry, 0
  end
end

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
    local o, charged = NEVER, false
    if cost <= L then
      local fits = true
      if cost > 0 then
        local oldest, rest = parts(gone + 1)
        local room = L - rest - cost
        fits = room >= 0 and ceil_muldiv(oldest, S - e, S) <= room
      end
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        charged = true
        if current > start then
          local shifted = {}
          for i = 1, len do
            shifted[i] = counts[i + gone] or 0
          end
          counts, start = shifted, current
        end
        counts[len] = counts[len] + cost
        gone = 0
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

-- Shaper (nginx limit_req). State 's<excess>:<last>': excess in
-- milli-requests, last in milliseconds.
local shaper_parse, shaper
if need.s then
  shaper_parse = function(v)
    local x, l = string.match(v, '^s(%d+):(%d+)$')
    x, l = int(x), int(l)
    if x and l then
      return { x, l }
    end
    return false
  end

  shaper = function(it, st, apply, now)
    local R, B, D, cost = it.R, it.B, it.D, it.cost
    local now_ms = floor(now / 1000)
    local ex, last
    if st then
      ex, last = st[1], st[2]
    end
    local function next_excess()
      if not ex then
        return 0
      end
      local ms = math.max(now_ms - last, 0)
      if ms >= ceil_muldiv(ex + 1000, 1000, R) then
        return 0
      end
      return ex + 1000 - muldiv(R, ms, 1000)
    end
    local extra = 0
    if cost > 0 then
      extra = 1000 * (cost - 1)
    end
    local nx = next_excess() + extra
    local o, delay, charged = ALLOWED, 0, false
    if cost == 0 then
      o = ALLOWED
    elseif extra > B then
      o = NEVER
    elseif nx <= B then
      if D >= 0 and nx > D then
        delay = muldiv(nx - D, 1000, R)
      end
      o = (delay > 0) and DELAYED or ALLOWED
      charged = charges(apply, true)
    else
      o = DENIED
      charged = charges(apply, false)
    end
    if charged then
      if not last or now_ms > last then
        last = now_ms
      end
      ex = math.min(nx, it.E)
    end
    local retry = -1
    if o == DENIED then
      local need = math.max(ex + 1000 + extra - B, 0)
      retry = math.max((last + ceil_muldiv(need, 1000, R)) * 1000 - now, 0)
    end
    local left = B - next_excess()
    local remaining = 0
    if left >= 0 then
      remaining = floor(left / 1000) + 1
    end
    local reset, idle = 0, nil
    if ex then
      idle = (last + ceil_muldiv(ex + 1000, 1000, R)) * 1000
      reset = math.max(idle - now, 0)
    end
    if charged then
      return o, floor(B / 1000) + 1, remaining, reset, retry, delay, 's' .. format('%d', ex) .. ':' .. format('%d', last), idle
    end
    return o, floor(B / 1000) + 1, remaining, reset, retry, delay
  end
end

-- Concurrency. State 'c<held>': units in flight.
local conc_parse, concurrency
if need.c then
  conc_parse = function(v)
    local h = int(string.match(v, '^c(%d+)$'))
    if h then
      return h
    end
    return false
  end

  concurrency = function(it, st, apply)
    local M, cost, held = it.M, it.cost, st or 0
    local o, charged = NEVER, false
    if cost <= M then
      if held + cost <= M then
        o = ALLOWED
        charged = cost > 0 and charges(apply, true)
        if charged then
          held = held + cost
        end
      else
        o = DENIED
      end
    end
    if charged then
      -- No idle instant: permits are held until released (or their lease ends).
      return o, M, math.max(M - held, 0), 0, -1, 0, 'c' .. format('%d', held), false
    end
    return o, M, math.max(M - held, 0), 0, -1, 0
  end
end

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
