-- Part of the decision script (see prelude.lua).

-- Shaper (nginx limit_req). State 's<excess>:<last>': excess in
-- milli-requests, last in milliseconds. A key keeps its state until it has
-- drained, as nginx keeps the node of a key alone in its zone (nginx's
-- deletion of idle nodes when other keys arrive is not reproduced here).
local shaper_parse, shaper
if need.s then
  shaper_parse = function(v)
    local x, l = string.match(v, '^s(%d+):(%d+)$')
    x, l = int(x), int(l)
    if x and l then
      return { x, l }
    end
    return false
  end

  shaper = function(it, st, apply, now)
    local R, B, D, cost = it.R, it.B, it.D, it.cost
    local now_ms = floor(now / 1000)
    local ex, last
    if st then
      ex, last = st[1], st[2]
    end
    local function next_excess()
      if not ex then
        return 0
      end
      local ms = math.max(now_ms - last, 0)
      if ms >= ceil_muldiv(ex + 1000, 1000, R) then
        return 0
      end
      return ex + 1000 - muldiv(R, ms, 1000)
    end
    local extra = 0
    if cost > 0 then
      extra = 1000 * (cost - 1)
    end
    local nx = next_excess() + extra
    local o, delay, charged = ALLOWED, 0, false
    if cost == 0 then
      o = ALLOWED
    elseif extra > B then
      o = NEVER
    elseif nx <= B then
      if D >= 0 and nx > D then
        delay = muldiv(nx - D, 1000, R)
      end
      o = (delay > 0) and DELAYED or ALLOWED
      charged = charges(apply, true)
    else
      o = DENIED
      charged = charges(apply, false)
    end
    if charged then
      if not last or now_ms > last then
        last = now_ms
      end
      ex = math.min(nx, it.E)
    end
    local retry = -1
    if o == DENIED then
      local need = math.max(ex + 1000 + extra - B, 0)
      retry = math.max((last + ceil_muldiv(need, 1000, R)) * 1000 - now, 0)
    end
    local left = B - next_excess()
    local remaining = 0
    if left >= 0 then
      remaining = floor(left / 1000) + 1
    end
    local reset, idle = 0, nil
    if ex then
      idle = (last + ceil_muldiv(ex + 1000, 1000, R)) * 1000
      reset = math.max(idle - now, 0)
    end
    if charged then
      return o, floor(B / 1000) + 1, remaining, reset, retry, delay, 's' .. format('%d', ex) .. ':' .. format('%d', last), idle
    end
    return o, floor(B / 1000) + 1, remaining, reset, retry, delay
  end
end
