-- Part of the decision script (see prelude.lua).

-- Concurrency: the permits in flight, each with its own lease (see
-- permits.lua). An admitted charge adds the request's permit, its lease
-- ending `lease` µs from now (never when lease is 0); every write drops the
-- permits whose lease has ended. The key expires when the last lease ends,
-- and goes when no permit is left.
local conc_parse, concurrency
if need.c then
  conc_parse = permits_parse

  -- The end of a lease starting now.
  local function lease_end(now)
    if lease > 0 then
      return math.min(now + lease, TWO53 - 1)
    end
    return 0
  end

  concurrency = function(it, st, apply, now)
    local M, cost = it.M, it.cost
    local live, held, last, changed = permits_live(st or {}, now, lease_end(now))
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
      local x, k = lease_end(now), #live + 1
      for j, p in ipairs(live) do
        if p[1] == it.id then
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
