-- Shared by the decision, lease and sync scripts (see prelude.lua): one
-- item's arguments.

-- Reads the item at ARGV[pos]: kind, cost, penalty, block, then the kind's
-- parameters (see prelude.lua). Returns the item, one table built by one
-- constructor with exactly its kind's fields, and the position after it;
-- or nil and an error reply. Records the kind in `need`: only the
-- functions of the kinds present are created (closures are created on
-- every call, so that saves time).
local function read_item(pos, need)
  local kind, a = ARGV[pos], pos + 4
  local cost, penalty, block = tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2]), tonumber(ARGV[pos + 3])
  -- A key sent for several items of the batch: their costs, in order.
  local members
  if not cost then
    members, cost = {}, 0
    for c in string.gmatch(ARGV[pos + 1], '%d+') do
      c = tonumber(c)
      members[#members + 1] = c
      cost = math.min(cost + c, TWO52)
    end
  end
  local it
  if kind == 'f' or kind == 'l' then
    it = { kind = kind, cost = cost, penalty = penalty, block = block, L = tonumber(ARGV[a]), W = tonumber(ARGV[a + 1]) }
    pos = a + 2
  elseif kind == 'g' then
    it = {
      kind = kind, cost = cost, penalty = penalty, block = block,
      P = tonumber(ARGV[a]), C = tonumber(ARGV[a + 1]), B = tonumber(ARGV[a + 2]),
      Wq = tonumber(ARGV[a + 3]), Wr = tonumber(ARGV[a + 4]),
      Nq = tonumber(ARGV[a + 5]), Nr = tonumber(ARGV[a + 6]),
    }
    pos = a + 7
  elseif kind == 'w' then
    it = { kind = kind, cost = cost, penalty = penalty, block = block, L = tonumber(ARGV[a]), S = tonumber(ARGV[a + 1]), N = 1 }
    pos = a + 2
  elseif kind == 'n' then
    it = {
      kind = kind, cost = cost, penalty = penalty, block = block,
      L = tonumber(ARGV[a]), S = tonumber(ARGV[a + 1]), N = tonumber(ARGV[a + 2]),
    }
    pos = a + 3
  elseif kind == 's' then
    it = {
      kind = kind, cost = cost, penalty = penalty, block = block,
      R = tonumber(ARGV[a]), B = tonumber(ARGV[a + 1]), D = tonumber(ARGV[a + 2]), E = tonumber(ARGV[a + 3]),
    }
    pos = a + 4
  elseif kind == 'c' then
    it = {
      kind = kind, cost = cost, penalty = penalty, block = block,
      M = tonumber(ARGV[a]), id = ARGV[a + 1], L = tonumber(ARGV[a + 2]),
    }
    if not string.match(it.id, '^%x+$') or not it.L then
      return nil, redis.error_reply('floodgate: bad permit id')
    end
    pos = a + 3
  else
    return nil, redis.error_reply('floodgate: unknown limit kind')
  end
  need[kind] = true
  it.members, it.total = members, cost
  return it, pos
end
