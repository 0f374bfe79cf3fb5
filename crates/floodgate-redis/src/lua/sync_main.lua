-- Part of the sync script (see sync.lua): each key's hits and state.

local now = clock(ARGV[1])
local resets = read_states(items, n, now)
local slack = ARGV[2]

local reply = { now, resets }
for i = 1, n do
  local it = items[i]
  local kind = it.kind
  local fields, v, idle = {}, nil, nil
  if it.blk > now and not (it.blocked and it.blocked >= it.blk) then
    it.blocked = it.blk
    v, idle = 'b' .. format('%d', it.blk), it.blk
  end
  if not it.blocked then
    local st, changed, c = it.st, false, false
    if kind == 'f' then
      st, changed = fixed_add(it, st, it.a1, it.k1, now)
      st, c = fixed_add(it, st, it.a2, it.k2, now)
    elseif kind == 'w' or kind == 'n' then
      st, changed = windows_add(it, st, it.a1, it.k1, now)
      st, c = windows_add(it, st, it.a2, it.k2, now)
    elseif it.k1 > 0 then
      -- GCRA: the tokens taken now, from the later of the TAT and now.
      local bi, bf = now, 0
      if st and not pair_less(st[1], st[2], now, 0) then
        bi, bf = st[1], st[2]
      end
      local gi, gf = intervals(it, it.k1)
      local ti, tf = pair_add(bi, bf, gi, gf, it.C)
      if ti > TWO52 then
        ti, tf = TWO52, 0
      end
      st, changed = { ti, tf, mark = st and st.mark }, true
    end
    if changed or c then
      v, idle = encode_state(it, st, now)
    end
    fields = state_fields(it, st)
  end
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
