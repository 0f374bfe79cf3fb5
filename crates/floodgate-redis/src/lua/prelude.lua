#!lua
-- Floodgate: one atomic rate limiting decision over the keys of one hash slot.
--
-- KEYS[i]    the state key of item i (distinct: duplicates are merged by the
--            client, which adds up their costs).
-- ARGV[1]    apply: 0 check, 1 commit, 2 force (penalty), 3 rejected.
-- ARGV[2]    now in microseconds, or '' to read the server clock (TIME).
-- ARGV[3]    '' to expire keys at their absolute idle instant (server clock);
--            otherwise a slack in ms added to a relative expiry (client time).
-- ARGV[4]    concurrency lease in ms (0: permits never expire): a permit
--            acquired at `now` is held until `now + lease` unless released.
-- ARGV[5..]  per item: kind, cost, penalty, block, then the kind's parameters,
--            all precomputed by the client as integers below 2^53. Penalty:
--            0 a denied request charges nothing, 1 it charges the limits that
--            denied it themselves, 2 it charges this limit whoever denied it.
--            Block: microseconds the key stays blocked after a denial (0:
--            never); a blocked key holds 'b<until>' and is denied outright
--            (a cost above the quota is never admitted). A concurrency
--            limit ignores both: it never charges a rejected request and
--            is never blocked.
--   g  GCRA          P C B Wq Wr Nq Nr  (T = P/C us; B*P = Wq*C + Wr;
--                                        cost*P = Nq*C + Nr)
--   f  fixed window  L W
--   w  two windows   L S                (counts saturate at 2^32 - 1)
--   n  sub-windows   L S N
--   l  sliding log   L W
--   s  shaper        R B D E            (milli-requests; D = -1: nodelay;
--                                        E: the largest excess kept)
--   c  concurrency   M id               (id: the request's permit, hex digits)
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
--
-- The script is assembled from these files, in this order: prelude.lua,
-- items.lua, arith.lua, one file per algorithm (permits.lua, shared with
-- the release script, before concurrency.lua), main.lua. Redis compiles
-- it into one function run on every call, so every closure below is created
-- on every call: the algorithms' functions are only created when the batch
-- has items of their kind (`need`).

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

-- Whether a decision with `apply` charges the cost. Besides the call's own
-- codes, 4 charges only a denial (a request another limit denied, under a
-- limit that counts its own denials).
local function charges(apply, allowed)
  if allowed then
    return apply == 1 or apply == 2
  end
  return apply == 2 or apply == 4
end
