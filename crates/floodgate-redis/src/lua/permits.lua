-- Part of the decision and the release scripts: the state of a concurrency
-- limit, one entry per permit.
--
-- State 'c' then, per permit, '<id>:<units>:<until>;': the permit's id (hex
-- digits, as the client names it), the units it holds, and the end of its
-- lease in µs (0: never). The units held are those of the live permits, the
-- ones whose lease has not ended (until > now); the others hold nothing and
-- are dropped by the next write. A permit acquired again (the same id) adds
-- its units and keeps the later end.
--
-- The legacy state 'c<held>' (one count for the whole key) reads as one
-- permit without an id, which no release names, whose lease ends a lease
-- after the decision that reads it.
local permits_parse, permits_live, permits_value, permits_expired
if need.c then
  -- The permits of `v`, a list of { id, units, until } (until -1: the
  -- legacy count's), or false when `v` is not a concurrency state (a key
  -- without permits is deleted, never written as 'c').
  permits_parse = function(v)
    if string.byte(v, 1) ~= 99 or string.len(v) < 2 then
      return false
    end
    local held = int(string.match(v, '^c(%d+)$'))
    if held then
      return { { '', held, -1 }, legacy = true }
    end
    local ps, pos, len = {}, 2, string.len(v)
    while pos <= len do
      local _, e, id, u, x = string.find(v, '^(%x*):(%d+):(%d+);', pos)
      if not e then
        return false
      end
      u, x = int(u), int(x)
      if not (u and x) then
        return false
      end
      ps[#ps + 1] = { id, u, x }
      pos = e + 1
    end
    return ps
  end

  -- The permits of `ps` live at `now` (a new list; the entries are shared,
  -- never changed), the units they hold, the latest end of their leases
  -- (false when one never ends) and whether the state must be written again
  -- (a permit dropped, or the legacy count given the end `legacy`).
  permits_live = function(ps, now, legacy)
    local live, held, last, never, changed = {}, 0, 0, false, false
    for _, p in ipairs(ps) do
      local x = p[3]
      if x < 0 then
        x = legacy
        p = { p[1], p[2], x }
        changed = true
      end
      if p[2] > 0 and (x == 0 or x > now) then
        live[#live + 1] = p
        held = held + p[2]
        if x == 0 then
          never = true
        elseif x > last then
          last = x
        end
      else
        changed = true
      end
    end
    return live, held, (not never) and last, changed
  end

  -- The units of `ps` whose lease ended by `now` (the legacy count, whose
  -- lease starts when it is read, never has).
  permits_expired = function(ps, now)
    local units = 0
    for _, p in ipairs(ps) do
      if p[3] > 0 and p[3] <= now then
        units = units + p[2]
      end
    end
    return units
  end

  -- The state holding `ps`; '' when there is none (the key goes).
  permits_value = function(ps)
    if #ps == 0 then
      return ''
    end
    local parts = { 'c' }
    for i, p in ipairs(ps) do
      parts[i + 1] = p[1] .. ':' .. format('%d', p[2]) .. ':' .. format('%d', p[3]) .. ';'
    end
    return table.concat(parts)
  end
end
