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

local function fmt(n)
  return string.format('%d', n)
end

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

-- Exact floor(a * b / c) and (a * b) mod c for integers a, b < 2^53,
-- 0 < c <= 2^52, when the quotient is below 2^53.
local function muldiv(a, b, c)
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

local function ceil_muldiv(a, b, c)
  local q, r = muldiv(a, b, c)
  if r > 0 then
    return q + 1
  end
  return q
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

-- GCRA. State: the theoretical arrival time TAT = ti + tf/C microseconds,
-- stored as 'g<ti>' or 'g<ti>:<tf>:<C>'.

local function gcra_parse(v, it)
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

local function gcra_until(ai, af, now)
  if ai > now then
    return ai - now + ((af > 0) and 1 or 0)
  elseif ai == now and af > 0 then
    return 1
  end
  return 0
end

local function gcra(it, st, apply, now)
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
  local res = { o, it.B, remaining, gcra_until(ai, af, now), retry, 0 }
  if new then
    local v
    if new[2] == 0 then
      v = 'g' .. fmt(new[1])
    else
      v = 'g' .. fmt(new[1]) .. ':' .. fmt(new[2]) .. ':' .. fmt(C)
    end
    return res, v, new[1] + ((new[2] > 0) and 1 or 0)
  end
  return res
end

-- Fixed window. State 'f<start>:<count>': the window's start and its count.

local function fixed_parse(v)
  local s, c = string.match(v, '^f(%d+):(%d+)$')
  s, c = int(s), int(c)
  if s and c then
    return { s, c }
  end
  return false
end

local function fixed(it, st, apply, now)
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
  local res = { o, L, math.max(L - count, 0), (count == 0) and 0 or stop, retry, 0 }
  if charged then
    return res, 'f' .. fmt(start) .. ':' .. fmt(count), start + W
  end
  return res
end

-- Sliding window counter. State '<w|n><start>:<c0>:...:<cN>': the start of
-- the current sub-window and the N + 1 counts, oldest first.

local function windows_parse(v, it)
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

local function windows(it, st, apply, now)
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
  local res = { o, L, remaining, reset, retry, 0 }
  if not charged then
    return res
  end
  local cap = (it.kind == 'w') and U32 or TWO51
  local out, idle = {}, start
  for i = 1, len do
    local c = math.min(counts[i], cap)
    out[i] = fmt(c)
    if c ~= 0 then
      idle = start + i * S
    end
  end
  return res, it.kind .. fmt(start) .. ':' .. table.concat(out, ':'), idle
end

-- Sliding log. State 'l' .. low .. records, packed big-endian doubles: `low`
-- numbers the units dropped so far, and each record (time, cum) says that
-- the units up to number `cum` arrived at `time` (times and cums increase).

local function log_parse(v)
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

local function rec(s, i)
  return struct.unpack('>d>d', s, 10 + 16 * i)
end

-- The first record index in [lo, n) whose time is after `t` (or n).
local function first_after(s, lo, n, t)
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
local function first_cum(s, lo, n, u)
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

local function sliding_log(it, st, apply, now)
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
  return { o, L, math.max(L - held, 0), reset, retry, 0 }, new, idle
end

-- Shaper (nginx limit_req). State 's<excess>:<last>': excess in
-- milli-requests, last in milliseconds.

local function shaper_parse(v)
  local x, l = string.match(v, '^s(%d+):(%d+)$')
  x, l = int(x), int(l)
  if x and l then
    return { x, l }
  end
  return false
end

local function shaper(it, st, apply, now)
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
  local res = { o, floor(B / 1000) + 1, remaining, reset, retry, delay }
  if charged then
    return res, 's' .. fmt(ex) .. ':' .. fmt(last), idle
  end
  return res
end

-- Concurrency. State 'c<held>': units in flight.

local function conc_parse(v)
  local h = int(string.match(v, '^c(%d+)$'))
  if h then
    return h
  end
  return false
end

local function concurrency(it, st, apply)
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
  local res = { o, M, math.max(M - held, 0), 0, -1, 0 }
  if charged then
    return res, 'c' .. fmt(held), nil
  end
  return res
end

local KINDS = {
  g = { params = { 'P', 'C', 'B', 'Wq', 'Wr', 'Nq', 'Nr' }, parse = gcra_parse, decide = gcra },
  f = { params = { 'L', 'W' }, parse = fixed_parse, decide = fixed },
  w = { params = { 'L', 'S' }, parse = windows_parse, decide = windows },
  n = { params = { 'L', 'S', 'N' }, parse = windows_parse, decide = windows },
  l = { params = { 'L', 'W' }, parse = log_parse, decide = sliding_log },
  s = { params = { 'R', 'B', 'D', 'E' }, parse = shaper_parse, decide = shaper },
  c = { params = { 'M' }, parse = conc_parse, decide = concurrency },
}

local apply = tonumber(ARGV[1])
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local slack = ARGV[3]
local lease = tonumber(ARGV[4])

local items, resets, pos = {}, 0, 5
for i = 1, #KEYS do
  local kind = ARGV[pos]
  local k = KINDS[kind]
  if not k then
    return redis.error_reply('floodgate: unknown limit kind')
  end
  local it = { kind = kind, k = k, cost = tonumber(ARGV[pos + 1]), penalty = ARGV[pos + 2] == '1' }
  pos = pos + 3
  for _, name in ipairs(k.params) do
    it[name] = tonumber(ARGV[pos])
    pos = pos + 1
  end
  if kind == 'w' then
    it.N = 1
  end
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' then
    resets = resets + 1
    v = false
  end
  if v then
    local st = k.parse(v, it)
    if st == false then
      resets = resets + 1
      st = nil
    end
    it.st = st
  end
  items[i] = it
end

-- Check every item first (stopping at the first refusal), then decide each
-- with what the outcome allows: all charged, or none (penalty excepted).
local mode = apply
if apply == 1 or apply == 2 then
  local all = true
  for i = 1, #items do
    local it = items[i]
    local res = it.k.decide(it, it.st, 0, now)
    if res[1] ~= ALLOWED and res[1] ~= DELAYED then
      all = false
      break
    end
  end
  if not all then
    mode = (apply == 2) and 2 or 3
  end
end

local reply, writes = { now, resets }, {}
for i = 1, #items do
  local it = items[i]
  local a = mode
  if it.penalty and (a == 1 or a == 3) then
    a = 2
  end
  local res, v, idle = it.k.decide(it, it.st, a, now)
  for j = 1, 6 do
    reply[#reply + 1] = res[j]
  end
  if v then
    writes[#writes + 1] = { KEYS[i], v, idle }
  end
end

for _, w in ipairs(writes) do
  local key, v, idle = w[1], w[2], w[3]
  if idle == nil then
    if lease > 0 then
      redis.call('SET', key, v, 'PX', lease)
    else
      redis.call('SET', key, v)
    end
  elseif slack == '' then
    redis.call('SET', key, v, 'PXAT', floor((idle + 999) / 1000))
  else
    local ms = floor((idle - now + 999) / 1000)
    redis.call('SET', key, v, 'PX', math.max(ms, 1) + tonumber(slack))
  end
end

return reply
