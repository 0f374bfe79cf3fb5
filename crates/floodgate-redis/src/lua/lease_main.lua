-- Part of the lease script (see lease.lua): each key's lease.

local now = clock(ARGV[1])
local resets = read_states(items, n, now)
local slack = ARGV[2]

-- What remains of the quota for `it` in state `st` at `now`: the units a
-- request could take, by the algorithm's own `remaining`.
local function remains(it, st)
  local cost, saved = it.cost, it.st
  it.cost, it.st = 0, st
  local _, _, remaining = decide(it, 0, now)
  it.cost, it.st = cost, saved
  return remaining
end

-- The end of a concurrency lease: a permit lease past the end of the grant.
local function permit_end(stop)
  if lease > 0 then
    return math.min(stop + lease, TWO53 - 1)
  end
  return 0
end

-- GCRA: when the holder's lease ends and it is the latest grant, its
-- unused units go back (at most that grant's size) and the TAT comes down
-- from the lease's end; then the TAT is raised to what the holder has seen.
-- Units of an older grant stay taken: a later grant's holder relies on the
-- TAT they hold up.
local function gcra_adjust(it, st)
  local ti, tf, mark = 0, 0, nil
  if st then
    ti, tf, mark = st[1], st[2], st.mark
  end
  local changed = false
  if it.ends and mark then
    local h, pi, pf, lg = string.match(mark, '^(%x+):(%d+):(%d+):(%d+)$')
    if h == holder then
      pi, pf, lg = int(pi), int(pf), int(lg)
      if pi and pf and lg and pf < it.C then
        local qi, qf = intervals(it, math.min(it.ret, lg))
        qi, qf = pair_add(qi, qf, pi, pf, it.C)
        ti, tf = pair_sub(ti, tf, qi, qf, it.C)
      end
      mark, changed = nil, true
    end
  end
  if (it.fi > 0 or it.ff > 0) and it.ff < it.C and it.fi <= TWO52
    and pair_less(ti, tf, it.fi, it.ff) then
    ti, tf, changed = it.fi, it.ff, true
  end
  if not st and not changed then
    return nil, false
  end
  return { ti, tf, mark = mark }, changed
end

-- GCRA: `g` tokens granted, the TAT first raised to the lease's end.
-- Returns the state and the lease's end. A lease lasts `dur`, but no
-- longer than the TAT already reaches (nothing to raise then: a busy
-- bucket) or else than the rate takes to refill `g` tokens: the raise then
-- costs at most as many tokens as the grant, never more than the burst
-- leaves.
local function gcra_grant(it, st, g)
  local bi, bf = now, 0
  if st and not pair_less(st[1], st[2], now, 0) then
    bi, bf = st[1], st[2]
  end
  local refill = muldiv(g, it.P, it.C)
  local room = muldiv(it.B - g, it.P, it.C)
  local span = math.min(refill, room)
  local stop = now + math.min(it.dur, math.max(bi - now, span))
  local hi, hf = bi, bf
  if pair_less(bi, bf, stop, 0) then
    hi, hf = stop, 0
  end
  local padi, padf = pair_sub(hi, hf, bi, bf, it.C)
  local gi, gf = intervals(it, g)
  local ni, nf = pair_add(hi, hf, gi, gf, it.C)
  local mark = holder .. ':' .. format('%d', padi) .. ':' .. format('%d', padf) .. ':' .. format('%d', g)
  return { ni, nf, mark = mark }, stop
end

-- Concurrency: the holder's entry set to the permits it has given out
-- (`units` more granted), the others' units, and the live permits.
local function conc_lease(it, st, units, stop)
  local live, held = permits_live(st or {}, now, permit_end(now))
  local out, mine, found = {}, 0, false
  for _, p in ipairs(live) do
    if p[1] == holder then
      found, mine = true, p[2]
      local x = p[3]
      if units > it.in_use then
        local e = permit_end(stop)
        x = (x ~= 0 and e ~= 0) and math.max(x, e) or 0
      end
      out[#out + 1] = { holder, units, x }
    else
      out[#out + 1] = p
    end
  end
  if not found then
    out[#out + 1] = { holder, units, permit_end(stop) }
  end
  return out, held - mine
end

local reply = { now, resets }
for i = 1, n do
  local it = items[i]
  local kind = it.kind
  local granted, stop, fields = 0, 0, {}
  local v, idle
  if kind ~= 'c' and it.blk > now and not (it.blocked and it.blocked >= it.blk) then
    -- Blocked by the holder: the block replaces the state (as a decision's
    -- block does).
    it.blocked = it.blk
    v, idle = 'b' .. format('%d', it.blk), it.blk
  end
  if not it.blocked then
    local st, changed = it.st, false
    if kind == 'f' or kind == 'w' or kind == 'n' then
      local add = (kind == 'f') and fixed_add or windows_add
      local c1, c2
      st, changed = add(it, st, it.at, -it.ret, now)
      st, c1 = add(it, st, it.a1, it.d1, now)
      st, c2 = add(it, st, it.a2, it.d2, now)
      changed = changed or c1 or c2
    elseif kind == 'g' then
      st, changed = gcra_adjust(it, st)
    end
    if kind == 'c' then
      local live, others = conc_lease(it, st, it.in_use, now)
      local avail = math.max(it.M - others - it.in_use, 0)
      if it.cost > 0 and avail >= it.cost then
        granted = math.min(it.want, math.max(it.cost, floor(avail / 2)), avail)
      end
      stop = now + it.dur
      fields = { others }
      if granted > 0 then
        live = conc_lease(it, st, it.in_use + granted, stop)
      end
      v, idle = encode_state(it, live, now)
    else
      local avail = remains(it, st)
      if it.cost > 0 and avail >= it.cost then
        granted = math.min(it.want, math.max(it.cost, floor(avail / 2)), avail)
      end
      fields = state_fields(it, st)
      if granted > 0 then
        if kind == 'g' then
          st, stop = gcra_grant(it, st, granted)
          v, idle = encode_state(it, st, now)
          -- The lease is usable up to its end included.
          stop = stop + 1
        else
          local cost, saved = it.cost, it.st
          it.cost, it.st = granted, st
          local width = (kind == 'f') and it.W or it.S
          local _
          _, _, _, _, _, _, v, idle = decide(it, 1, now)
          it.cost, it.st = cost, saved
          stop = math.min(now + it.dur, window_start(now, width) + width)
        end
      elseif changed then
        v, idle = encode_state(it, st, now)
      end
    end
  end
  reply[#reply + 1] = granted
  reply[#reply + 1] = stop
  reply[#reply + 1] = it.blocked or 0
  reply[#reply + 1] = #fields
  for _, x in ipairs(fields) do
    reply[#reply + 1] = x
  end
  if v then
    write_state(KEYS[i], v, idle, now, slack)
  end
end

return reply
