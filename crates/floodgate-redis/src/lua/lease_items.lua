-- Part of the lease script (see lease.lua): reading the items.

local n = #KEYS
-- The concurrency permits' lease in µs (0: permits never expire).
local lease = tonumber(ARGV[3]) * 1000
local holder = ARGV[4]
if not string.match(holder, '^%x+$') then
  return redis.error_reply('floodgate: bad holder id')
end

local items, pos = {}, 5
local need = {}
for i = 1, n do
  local it, next_pos = read_item(pos, need)
  if not it then
    return next_pos
  end
  if it.kind == 'l' or it.kind == 's' then
    return redis.error_reply('floodgate: no leases for this kind')
  end
  local a = next_pos
  it.want, it.dur = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  it.ret, it.ends, it.at = tonumber(ARGV[a + 2]), ARGV[a + 3] == '1', tonumber(ARGV[a + 4])
  it.a1, it.d1 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  it.a2, it.d2 = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
  it.fi, it.ff = tonumber(ARGV[a + 9]), tonumber(ARGV[a + 10])
  it.in_use, it.blk = tonumber(ARGV[a + 11]), tonumber(ARGV[a + 12])
  items[i], pos = it, a + 13
end
