-- GCRA.
-- k2  layout 2: a string, the doubles at, level, unit, drain: the bucket's
--     level at time at, in the units of the rate it was written under (a
--     request weighs unit, a µs drains drain)
-- k1  layout 1: a string "at:level:unit:drain"
local function gcra1_read(k1)
  local v = redis.call('GET', k1)
  if v then
    local a, l, u, d = string.match(v, '^(%-?%d+):(%d+):(%d+):(%d+)$')
    return tonumber(a) or 0 / 0, tonumber(l), tonumber(u), tonumber(d)
  end
end

local function gcra1_write(k1, ms, at, level, unit, drain)
  redis.call('SET', k1, string.format('%.0f:%.0f:%.0f:%.0f', at, level, unit, drain), 'PX', ms)
end

local function gcra(k2, k1, l2, now, burst, unit, drain, cost, op, retain, slack)
  local moved, at, l, u, d = load(k2, k1, l2, '<dddd', gcra1_read)
  if at and not (valid(at, 0, max_time) and valid(l, 0, max_level) and valid(u, 1, max_unit) and valid(d, 1, max_count)) then at = nil end
  local level, future = 0, false
  if at then
    level = l
    if level > 0 then
      if u ~= unit or d ~= drain then -- another rate: as many requests, at most a burst
        level = math.min(ceildiv(level, u), burst) * unit
      end
      if now > at then
        local elapsed = now - at
        if elapsed >= ceildiv(level, drain) then level = 0 else level = level - elapsed * drain end
      else
        future = now < at -- from the future: as if written now
      end
    end
  end
  local write = false
  if op == 'refund' then
    if cost > ceildiv(level, unit) then return 2, ceildiv(level, unit), 0, 0 end
    level = math.max(level - cost * unit, 0)
    cost, op, write = 1, 'peek', true
  end
  local capacity = burst * unit
  local allowed = cost * unit <= capacity - level
  local retry = 0
  if not allowed then
    retry = ceildiv(level + cost * unit - capacity, drain)
    write = write or (op == 'take' and future and not quiet)
  elseif op == 'take' then
    level, write = level + cost * unit, true
  end
  if write then
    save(k2, k1, l2, moved, ttl(ceildiv(level, drain), retain, slack), '<dddd', gcra1_write, now, level, unit, drain)
  end
  local count = ceildiv(level, unit)
  local reset_at = now
  if count > 0 then reset_at = now + ceildiv(level - (count - 1) * unit, drain) end
  return allowed and 1 or 0, count, reset_at, retry
end
