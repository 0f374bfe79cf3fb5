-- Part of the decision script (see prelude.lua): the two phases of a
-- batch, and the writes.

local now = clock(ARGV[2])
local resets = read_states(items, n, now)

-- The units of concurrency permits whose lease ended unreturned, as read:
-- counted once the write that drops them is done.
for i = 1, n do
  local it = items[i]
  if it.kind == 'c' and it.st then
    it.expired = permits_expired(it.st, now)
  end
end

-- A dry run decides as a commit (5) or a rejection (6) would, and writes
-- nothing.
local dry = false
if apply == 5 then
  dry, apply = true, 1
elseif apply == 6 then
  dry, apply = true, 3
end

-- An item's cost for one of its members (items with equal keys are sent
-- once, with the costs of every member): the GCRA's precomputed cost
-- quotient follows it.
local function set_cost(it, c)
  it.cost = c
  if it.kind == 'g' then
    it.Nq, it.Nr = muldiv(c, it.P, it.C)
  end
end

-- One decision with the item's block: a denial (except by a blocked key,
-- or of a concurrency limit) under a limit with a block starts one.
local function step(it, a, now)
  local o, limit, remaining, reset, retry, delay, v, idle = decide(it, a, now)
  -- Neither a peek nor a refund (7) starts a block: they charge nothing.
  if o == DENIED and it.block > 0 and it.kind ~= 'c' and a ~= 0 and a ~= 7 and not it.blocked then
    local u = now + it.block
    remaining, reset, retry, delay = 0, it.block, it.block, 0
    v, idle = 'b' .. format('%d', u), u
  end
  return o, limit, remaining, reset, retry, delay, v, idle
end

-- A key's state as a value: '' for none, 'b<until>' for a block, or the
-- kind's own text. The algorithms may change the tables they decide on, so
-- a state to decide on again is parsed again from its value.
local function value_of(it)
  if it.blocked then
    return 'b' .. format('%d', it.blocked)
  end
  return it.raw or ''
end

local function load(it, v)
  it.st, it.blocked = nil, nil
  if v == '' then
    return
  elseif string.byte(v, 1) == 98 then
    local u = int(string.sub(v, 2))
    if u and u > now then
      it.blocked = u
    end
  else
    it.st = parse(it, v) or nil
  end
end

-- The code an item is decided with in a batch decided with `m`. Penalty 2
-- charges every denied request (commit and rejected become force); penalty
-- 1 charges the requests the limit itself denies (commit becomes force,
-- rejected charges only the limit's own denial: 4). Neither applies to a
-- concurrency limit, which never charges a rejected request (even a forced
-- one).
local function effective(it, m, rejected)
  local a, p = m, it.penalty
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
  return a
end

-- Check every item first (stopping at the first refusal), then decide each
-- with what the outcome allows: all charged, or none (penalty excepted). A
-- single item needs no separate check: its own decision is check-then-charge.
-- Members of one key are checked in order, each against what the ones
-- before it would leave. A limit with a block that denies a request (except
-- in a peek) blocks the key: its state is replaced by 'b<until>', which
-- expires when the block ends. A concurrency limit is never blocked: its
-- count must outlive any block.
local mode, rejected = apply, apply == 3
if (n > 1 or items[1].members) and (apply == 1 or apply == 2) then
  for i = 1, n do
    local it = items[i]
    local ok = true
    if it.members then
      local read = value_of(it)
      local cur = read
      for _, c in ipairs(it.members) do
        set_cost(it, c)
        load(it, cur)
        local o, _, _, _, _, _, v = decide(it, 1, now)
        if o ~= ALLOWED and o ~= DELAYED then
          ok = false
          break
        end
        cur = v or cur
      end
      load(it, read)
      set_cost(it, it.total)
    else
      local o = decide(it, 0, now)
      ok = o == ALLOWED or o == DELAYED
    end
    if not ok then
      mode, rejected = (apply == 2) and 2 or 3, true
      break
    end
  end
end

local reply = { now, resets, 0 }
local r = 3
local function put(o, limit, remaining, reset, retry, delay)
  reply[r + 1], reply[r + 2], reply[r + 3] = o, limit, remaining
  reply[r + 4], reply[r + 5], reply[r + 6] = reset, retry, delay
  r = r + 6
end

for i = 1, n do
  local it = items[i]
  local a = effective(it, mode, rejected)
  if not it.members then
    local o, limit, remaining, reset, retry, delay, v, idle = step(it, a, now)
    put(o, limit, remaining, reset, retry, delay)
    it.v, it.idle = v, idle
  elseif dry or mode == 0 or mode == 3 then
    -- Each member reported in order against a view of the key where the
    -- members before it were charged.
    local read = value_of(it)
    local cur = read
    local charging = mode == 1 or mode == 2
    for _, c in ipairs(it.members) do
      set_cost(it, c)
      load(it, cur)
      local o, limit, remaining, reset, retry, delay, v = step(it, a, now)
      put(o, limit, remaining, reset, retry, delay)
      if not charging then
        load(it, cur)
        o, limit, remaining, reset, retry, delay, v = step(it, 2, now)
      end
      cur = v or cur
    end
    load(it, read)
    set_cost(it, it.total)
    if mode == 3 and not dry then
      -- The key itself takes the members' summed cost, rejected.
      local _, _, _, _, _, _, v, idle = step(it, a, now)
      it.v, it.idle = v, idle
    end
  else
    -- Charged in order.
    local cur = value_of(it)
    for _, c in ipairs(it.members) do
      set_cost(it, c)
      load(it, cur)
      local o, limit, remaining, reset, retry, delay, v, idle = step(it, a, now)
      put(o, limit, remaining, reset, retry, delay)
      if v then
        it.v, it.idle, cur = v, idle, v
      end
    end
  end
end

if dry then
  return reply
end

local slack = ARGV[3]
for i = 1, n do
  local it = items[i]
  if it.v then
    reply[3] = reply[3] + (it.expired or 0)
    write_state(KEYS[i], it.v, it.idle, now, slack)
  end
end

return reply
