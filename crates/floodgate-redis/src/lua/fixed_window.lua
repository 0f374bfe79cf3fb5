-- Part of the decision script (see prelude.lua).

-- Fixed window. State 'f<start>:<count>': the window's start and its count.
local fixed_parse, fixed
if need.f then
  fixed_parse = function(v)
    local s, c = string.match(v, '^f(%d+):(%d+)$')
    s, c = int(s), int(c)
    if s and c then
      return { s, c }
    end
    return false
  end

  fixed = function(it, st, apply, now)
    local L, W, cost = it.L, it.W, it.cost
    local _, r = divmod(now, W)
    local start, count = now - r, 0
    if st and st[1] >= start then
      start, count = st[1], st[2]
    end
    local stop = W - (math.max(now, start) - start)
    local o, retry, charged = NEVER, -1, false
    if apply == 7 then
      -- A refund: only the current window holds units to give back.
      o = ALLOWED
      if cost > 0 and count > 0 then
        count = math.max(count - cost, 0)
        charged = true
      end
    elseif cost <= L then
      -- A check (cost 0) on a window that forced charges took past its
      -- limit is over until the window ends.
      local fits = (cost == 0 and count <= L) or (cost > 0 and count + cost <= L)
      o = fits and ALLOWED or DENIED
      if cost > 0 and charges(apply, fits) then
        count = math.min(count + cost, TWO52)
        charged = true
      end
      if not fits then
        retry = stop
      end
    elseif charges(apply, false) then
      -- No window admits it; a forced charge still counts it.
      count = math.min(count + cost, TWO52)
      charged = true
    end
    local remaining, reset = math.max(L - count, 0), (count == 0) and 0 or stop
    if charged then
      return o, L, remaining, reset, retry, 0, 'f' .. format('%d', start) .. ':' .. format('%d', count), start + W
    end
    return o, L, remaining, reset, retry, 0
  end
end
