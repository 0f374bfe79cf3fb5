-- Part of the decision script (see prelude.lua).

-- Concurrency. State 'c<held>': units in flight.
local conc_parse, concurrency
if need.c then
  conc_parse = function(v)
    local h = int(string.match(v, '^c(%d+)$'))
    if h then
      return h
    end
    return false
  end

  concurrency = function(it, st, apply)
    local M, cost, held = it.M, it.cost, st or 0
    local o, charged = NEVER, false
    if cost <= M then
      if held + cost <= M then
        o = ALLOWED
        charged = cost > 0 and charges(apply, true)
        if charged then
          held = held + cost
        end
      else
        o = DENIED
      end
    end
    if charged then
      -- No idle instant: permits are held until released (or their lease ends).
      return o, M, math.max(M - held, 0), 0, -1, 0, 'c' .. format('%d', held), false
    end
    return o, M, math.max(M - held, 0), 0, -1, 0
  end
end
