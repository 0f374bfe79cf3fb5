-- Part of the decision script (see prelude.lua): exact multiply-divide.

-- Exact floor(a * b / c) and (a * b) mod c for integers a, b < 2^53,
-- 0 < c <= 2^52, when the quotient is below 2^53.
local muldiv, ceil_muldiv
if need.g or need.w or need.n or need.s then
  muldiv = function(a, b, c)
    local p = a * b
    if p < TWO53 then
      return divmod(p, c)
    end
    local bq, br = divmod(b, c)
    local bits, n, x = {}, 0, a
    while x > 0 do
      local bit = x % 2
      n = n + 1
      bits[n] = bit
      x = (x - bit) / 2
    end
    local q, r = 0, 0
    for i = n, 1, -1 do
      q = q * 2
      r = r * 2
      if r >= c then
        r = r - c
        q = q + 1
      end
      if bits[i] == 1 then
        r = r + br
        if r >= c then
          r = r - c
          q = q + 1
        end
      end
    end
    return q + a * bq, r
  end

  ceil_muldiv = function(a, b, c)
    local q, r = muldiv(a, b, c)
    if r > 0 then
      return q + 1
    end
    return q
  end
end
