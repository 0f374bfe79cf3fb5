-- Part of the decision script (see prelude.lua): the two phases of a
-- batch, and the writes.

local now = clock(ARGV[2])
local resets = read_states(items, n, now)

-- Check every item first (stopping at the first refusal), then decide each
-- with what the outcome allows: all charged, or none (penalty excepted). A
-- single item needs no separate check: its own decision is check-then-charge.
-- Penalty 2 charges every denied request (commit and rejected become
-- force); penalty 1 charges the requests the limit itself denies (commit
-- becomes force, rejected charges only the limit's own denial: 4). A limit
-- with a block that denies a request (except in a dry run) blocks the key:
-- its state is replaced by 'b<until>', which expires when the block ends.
-- Neither applies to a concurrency limit, which never charges a rejected
-- request (even a forced one) and is never blocked: units it did not admit
-- would never be given back, and its count must outlive any block.
local mode, rejected = apply, apply == 3
if n > 1 and (apply == 1 or apply == 2) then
  for i = 1, n do
    local o = decide(items[i], 0, now)
    if o ~= ALLOWED and o ~= DELAYED then
      mode, rejected = (apply == 2) and 2 or 3, true
      break
    end
  end
end

local reply = { now, resets }
local r = 2
for i = 1, n do
  local it = items[i]
  local a, p = mode, it.penalty
  if it.kind == 'c' then
    p = 0
    if rejected then
      a = 3
    end
  end
  if p == 2 and (a == 1 or a == 3) then
    a = 2
  elseif p == 1 then
    if a == 1 then
      a = 2
    elseif a == 3 then
      a = 4
    end
  end
  local o, limit, remaining, reset, retry, delay, v, idle = decide(it, a, now)
  if o == DENIED and it.block > 0 and it.kind ~= 'c' and mode ~= 0 and not it.blocked then
    local u = now + it.block
    remaining, reset, retry, delay = 0, it.block, it.block, 0
    v, idle = 'b' .. format('%d', u), u
  end
  reply[r + 1], reply[r + 2], reply[r + 3] = o, limit, remaining
  reply[r + 4], reply[r + 5], reply[r + 6] = reset, retry, delay
  r = r + 6
  it.v, it.idle = v, idle
end

local slack = ARGV[3]
for i = 1, n do
  local it = items[i]
  if it.v then
    write_state(KEYS[i], it.v, it.idle, now, slack)
  end
end

return reply
