#!lua
-- Floodgate: give back units of a concurrency permit.
--
-- KEYS[1]  the state key (see permits.lua).
-- ARGV[1]  the units to give back.
-- ARGV[2]  the permit's id (hex digits).
-- ARGV[3]  now in microseconds, or '' to read the server clock (TIME).
-- ARGV[4]  '' to expire the key at the end of its last lease (server
--          clock); otherwise a slack in ms added to a relative expiry.
--
-- Reply: the units given back. The permit gives back at most what it
-- holds and goes once it holds nothing; a permit the key does not hold
-- (never acquired, acquired for another key, already released, or its
-- lease ended) gives back nothing (0), and nothing changes. Permits whose lease has ended are dropped, and the key is
-- deleted when no permit is left. A key that holds anything else, or the
-- legacy count 'c<held>', is left alone.
--
-- The script is assembled from this file, permits.lua and release_main.lua.

local TWO53 = 9007199254740992
local format = string.format
local need = { c = true }

-- A stored integer, or nil when it is not one below 2^53.
local function int(s)
  local x = tonumber(s)
  if x and x < TWO53 then
    return x
  end
  return nil
end
