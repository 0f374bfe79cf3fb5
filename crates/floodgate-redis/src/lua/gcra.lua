-- Part of the decision script (see prelude.lua).

-- GCRA. State: the theoretical arrival time TAT = ti + tf/C microseconds,
-- stored as 'g<ti>' or 'g<ti>:<tf>:<C>', optionally followed by
-- '|<holder>:<pi>:<pf>:<units>': the latest lease granted on the key (see
-- lease_main.lua), which a decision ignores and drops when it writes.
local gcra_parse, gcra_until, gcra
if need.g then
  gcra_parse = function(v, it)
    local mark
    local body, m = string.match(v, '^([^|]*)|(.*)$')
    if body then
      v, mark = body, m
    end
    local ti, tf, c = string.match(v, '^g(%d+):(%d+):(%d+)$')
    if ti then
      ti, tf, c = int(ti), int(tf), int(c)
      if not (ti and tf and c) or ti >= TWO52 then
        return false
      end
      if c ~= it.C or tf >= c then
        -- Another rate: round up to the next whole microsecond (never early),
        -- and forget a lease granted at the other rate.
        return { ti + 1, 0 }
      end
      return { ti, tf, mark = mark }
    end
    ti = int(string.match(v, '^g(%d+)$'))
    if ti and ti <= TWO52 then
      return { ti, 0, mark = mark }
    end
    return false
  end

  gcra_until = function(ai, af, now)
    if ai > now then
      return ai - now + ((af > 0) and 1 or 0)
    elseif ai == now and af > 0 then
      return 1
    end
    return 0
  end

  gcra = function(it, st, apply, now)
    local C, P, cost = it.C, it.P, it.cost
    local bi, bf = now, 0
    if st and (st[1] > now or (st[1] == now and st[2] > 0)) then
      bi, bf = st[1], st[2]
    end
    local li, lf = now + it.Wq, it.Wr
    local o, ai, af, retry, new = NEVER, bi, bf, -1, nil
    local xi, xf = bi + it.Nq, bf + it.Nr
    if xf >= C then
      xf = xf - C
      xi = xi + 1
    end
    if xi > TWO52 then
      xi, xf = TWO52, 0
    end
    -- A cost over the burst is never admitted, but a charge that must
    -- commit (penalty mode) counts all of it: debt. A cost of 0 only
    -- peeks, denied while the bucket is in debt.
    local fits = cost <= it.B and (xi < li or (xi == li and xf <= lf))
    if cost > 0 and charges(apply, fits) then
      ai, af = xi, xf
      new = { xi, xf }
    end
    if cost <= it.B then
      o = fits and ALLOWED or DENIED
      if not fits then
        local ti, tf = ai + it.Nq - it.Wq, af + it.Nr - it.Wr
        if tf >= C then
          tf = tf - C
          ti = ti + 1
        elseif tf < 0 then
          tf = tf + C
          ti = ti - 1
        end
        retry = gcra_until(ti, tf, now)
      end
    end
    local remaining = 0
    if li > ai or (li == ai and lf > af) then
      local di, df = li - ai, lf - af
      if df < 0 then
        df = df + C
        di = di - 1
      end
      local q1, r1 = muldiv(di, C, P)
      remaining = q1 + divmod(r1 + df, P)
    end
    local reset = gcra_until(ai, af, now)
    if not new then
      return o, it.B, remaining, reset, retry, 0
    end
    local v
    if new[2] == 0 then
      v = 'g' .. format('%d', new[1])
    else
      v = 'g' .. format('%d', new[1]) .. ':' .. format('%d', new[2]) .. ':' .. format('%d', C)
    end
    return o, it.B, remaining, reset, retry, 0, v, new[1] + ((new[2] > 0) and 1 or 0)
  end
end
