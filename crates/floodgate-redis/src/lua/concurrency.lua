-- Part of the decision script (see prelude.lua).

-- Concurrency: the permits in flight, each with its own lease (see
-- permits.lua). An admitted charge adds the request's permit, its lease
-- ending `lease` µs from now (never when lease is 0); every write drops the
-- permits whose lease has ended. The key expires when the last lease ends,
-- and goes when no permit is left.
--
-- A limit with its own lease (it.L > 0: driven over RLS by increments and
-- negative hits) records each charge apart, so that every unit's lease ends
-- a lease after it was taken, and a refund (apply 7) gives back up to the
-- cost of the units its id (the holder; '0': no holder) holds, those whose
-- lease ends first first; never another id's.
local conc_parse, concurrency
if need.c then
  conc_parse = permits_parse

  -- The end of a lease of `l` µs starting now (0: never).
  local function lease_end(now, l)
    if l > 0 then
      return math.min(now + l, TWO53 - 1)
    end
    return 0
  end

  -- Gives back up to `units` of the permits of `id` in `live` (in the
  -- order their leases end); returns the units given back.
  local function give_back(live, id, units)
    local left = units
    for j, p in ipairs(live) do
      if left == 0 then
        break
      end
      if p[1] == id and p[2] > 0 then
        local n = math.min(left, p[2])
        live[j] = { id, p[2] - n, p[3] }
        left = left - n
      end
    end
    return units - left
  end

  -- A refund of a leased limit: OK, with what remains after it.
  local function refund(it, live, held, last, changed)
    local given = give_back(live, it.id, it.cost)
    if given > 0 then
      live, held, last = permits_live(live, 0, 0)
      changed = true
    end
    local remaining = math.max(it.M - held, 0)
    if changed then
      return ALLOWED, it.M, remaining, 0, -1, 0, permits_value(live), last
    end
    return ALLOWED, it.M, remaining, 0, -1, 0
  end

  concurrency = function(it, st, apply, now)
    local M, cost, own = it.M, it.cost, it.L > 0
    local l = own and it.L or lease
    local live, held, last, changed = permits_live(st or {}, now, lease_end(now, l))
    if own and apply == 7 then
      return refund(it, live, held, last, changed)
    end
    local o, charged = NEVER, false
    if cost <= M then
      if held + cost <= M then
        o = ALLOWED
        charged = cost > 0 and charges(apply, true)
      else
        o = DENIED
      end
    end
    if charged then
      held = held + cost
      local x, k = lease_end(now, l), #live + 1
      for j, p in ipairs(live) do
        if p[1] == it.id and not (own and p[3] ~= x) then
          k, cost = j, p[2] + cost
          x = (x ~= 0 and p[3] ~= 0) and math.max(x, p[3]) or 0
          break
        end
      end
      live[k] = { it.id, cost, x }
      if x == 0 then
        last = false
      elseif last then
        last = math.max(last, x)
      end
      changed = true
    end
    local remaining = math.max(M - held, 0)
    if changed then
      return o, M, remaining, 0, -1, 0, permits_value(live), last
    end
    return o, M, remaining, 0, -1, 0
  end
end
