-- Part of the decision script (see prelude.lua): reading the items.

local apply = tonumber(ARGV[1])
local n = #KEYS
-- The concurrency lease in µs (0: permits never expire).
local lease = tonumber(ARGV[4]) * 1000

-- Read the items (see read_item.lua).
local items, pos = {}, 5
local need = {}
for i = 1, n do
  local it, next_pos = read_item(pos, need)
  if not it then
    return next_pos
  end
  items[i], pos = it, next_pos
end
