-- Shared by the lease and sync scripts (see lease.lua): a key's state
-- changed outside a decision (units given back, units owed, hits pushed),
-- written back, and sent to the client as numbers.

-- The sub-window start holding `now`.
local function window_start(now, width)
  local _, r = divmod(now, width)
  return now - r
end

-- Fixed window: `k` units (negative: given back) in the window starting
-- at `at`. A state of an older window is replaced when `at` is the current
-- one; units of a window that is over change nothing. Returns the state
-- and whether it changed.
local function fixed_add(it, st, at, k, now)
  if k == 0 then
    return st, false
  end
  if st and st[1] == at then
    return { at, math.min(math.max(st[2] + k, 0), TWO52) }, true
  end
  if k > 0 and (not st or st[1] < at) and at == window_start(now, it.W) then
    return { at, math.min(k, TWO52) }, true
  end
  return st, false
end

-- Sliding windows: the state moved forward so that its last count is the
-- sub-window starting at `to` (a state already there or later is kept).
local function windows_roll(it, st, to)
  local len = it.N + 1
  if not st then
    local counts = {}
    for i = 1, len do
      counts[i] = 0
    end
    return { to, counts }
  end
  if st[1] >= to then
    return st
  end
  local gone = floor((to - st[1]) / it.S)
  local counts = {}
  for i = 1, len do
    counts[i] = st[2][i + gone] or 0
  end
  return { to, counts }
end

-- Sliding windows: `k` units (negative: given back) in the sub-window
-- starting at `at`, if it is still counted (a state of an older sub-window
-- moves forward to it first). Returns the state and whether it changed.
local function windows_add(it, st, at, k, now)
  if k == 0 then
    return st, false
  end
  local len = it.N + 1
  if k > 0 and at <= now and (not st or st[1] < at) then
    -- Units of a sub-window the state has not reached yet.
    st = windows_roll(it, st, at)
  end
  if not st or st[1] < at or (st[1] - at) % it.S ~= 0 then
    return st, false
  end
  local idx = len - (st[1] - at) / it.S
  if idx < 1 then
    return st, false
  end
  local cap = (it.kind == 'w') and U32 or TWO51
  local counts = {}
  for i = 1, len do
    counts[i] = st[2][i]
  end
  counts[idx] = math.min(math.max(counts[idx] + k, 0), cap)
  return { st[1], counts }, true
end

-- GCRA: TAT pairs (whole µs, then ticks of 1/C µs).
local function pair_less(ai, af, bi, bf)
  return ai < bi or (ai == bi and af < bf)
end

local function pair_add(ai, af, bi, bf, C)
  local i, f = ai + bi, af + bf
  if f >= C then
    f = f - C
    i = i + 1
  end
  return i, f
end

-- (ai, af) − (bi, bf), at least 0.
local function pair_sub(ai, af, bi, bf, C)
  local i, f = ai - bi, af - bf
  if f < 0 then
    f = f + C
    i = i - 1
  end
  if i < 0 then
    return 0, 0
  end
  return i, f
end

-- GCRA: `k` emission intervals as a pair.
local function intervals(it, k)
  local q, r = muldiv(k, it.P, it.C)
  return q, r
end

-- The value and idle instant of a state edited here at `now` (false: the
-- key holds nothing; a concurrency state without permits is '', which
-- deletes the key).
local function encode_state(it, st, now)
  local kind = it.kind
  if not st then
    return false
  end
  if kind == 'f' then
    return 'f' .. format('%d', st[1]) .. ':' .. format('%d', st[2]), st[1] + it.W
  elseif kind == 'w' or kind == 'n' then
    local out, idle = {}, st[1]
    for i = 1, it.N + 1 do
      out[i] = format('%d', st[2][i])
      if st[2][i] ~= 0 then
        idle = st[1] + i * it.S
      end
    end
    return kind .. format('%d', st[1]) .. ':' .. table.concat(out, ':'), idle
  elseif kind == 'g' then
    local ti, tf = math.min(st[1], TWO52), st[2]
    local v = 'g' .. format('%d', ti)
    if tf > 0 then
      v = v .. ':' .. format('%d', tf) .. ':' .. format('%d', it.C)
    end
    if st.mark then
      v = v .. '|' .. st.mark
    end
    return v, ti + ((tf > 0) and 1 or 0)
  end
  local live, _, last = permits_live(st, now, 0)
  return permits_value(live), last
end

-- The state as numbers for the client: a fixed window's start and count, a
-- sliding window's start and N + 1 counts, a TAT's two parts (see
-- `src/sharing/state.rs`).
local function state_fields(it, st)
  local kind = it.kind
  if kind == 'f' then
    if st then
      return { st[1], st[2] }
    end
    return { 0, 0 }
  elseif kind == 'w' or kind == 'n' then
    local out = { st and st[1] or 0 }
    for i = 1, it.N + 1 do
      out[i + 1] = st and st[2][i] or 0
    end
    return out
  elseif kind == 'g' then
    if st then
      return { st[1], st[2] }
    end
    return { 0, 0 }
  end
  return {}
end
