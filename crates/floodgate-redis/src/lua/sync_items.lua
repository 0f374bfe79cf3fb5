-- Part of the sync script (see sync.lua): reading the items.

local n = #KEYS
-- Read by the concurrency functions, which sync never calls.
local lease = 0

local items, pos = {}, 3
local need = {}
for i = 1, n do
  local it, next_pos = read_item(pos, need)
  if not it then
    return next_pos
  end
  if it.kind == 'l' or it.kind == 's' or it.kind == 'c' then
    return redis.error_reply('floodgate: no sync for this kind')
  end
  local a = next_pos
  it.a1, it.k1 = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  it.a2, it.k2 = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  it.blk = tonumber(ARGV[a + 4])
  items[i], pos = it, a + 5
end
