-- wrk script: every request carries one of 100 000 distinct limit keys.
math.randomseed(42)
request = function()
  return wrk.format("GET", "/", { ["X-Limit-Key"] = "k" .. math.random(1, 100000) })
end
