-- GCRA. ka (v, its value: state.lua): a string, the doubles at and level,
-- then unit and drain as 6-byte unsigned integers (28 bytes, under 128 a
-- key): the bucket's level at time at, in the units of the rate it was
-- written under (a request weighs unit, a µs drains drain). p1, p2, p3:
-- burst, unit, drain.
local burst, unit, drain = p1, p2, p3
local floor = math.floor
local at, l, u, d
if v and #v == 28 then at, l, u, d = struct.unpack('<ddI6I6', v) end
local level, future = 0, false
if at and at >= 0 and at <= max_time and at % 1 == 0 and l >= 0 and l <= max_level and l % 1 == 0
    and u >= 1 and u <= max_unit and d >= 1 and d <= max_count then -- u, d: unsigned integers
  level = l
  if level > 0 and at > now and at - now <= max_skew then now = at end -- the key's time
  if level > 0 then
    if u ~= unit or d ~= drain then -- another rate: as many requests, at most a burst
      level = math.min(floor((level + u - 1) / u), burst) * unit
    end
    if now > at then
      local elapsed = now - at
      if elapsed >= floor((level + drain - 1) / drain) then level = 0 else level = level - elapsed * drain end
    else
      future = now < at -- from the future: as if written now
    end
  end
end
local write, fit = false, nil
local capacity = burst * unit
if op == 'refund' then
  local held = floor((level + unit - 1) / unit)
  if cost > held then return {2, held, 0, 0, now} end
  level = math.max(level - cost * unit, 0)
  cost, op, write = 1, 'peek', true
elseif op == 'undo' then -- a bucket does not tell one admission from another
  if level > 0 then level, write = math.max(level - cost * unit, 0), true end
  cost, op = 1, 'peek'
elseif op == 'charge' then -- past the burst if need be, by what drains in max_debt at most
  local room = max_stored - capacity
  local top = capacity + room - math.fmod(room, drain)
  if max_debt * drain <= room then top = capacity + max_debt * drain end
  if cost * unit >= top - level then level = math.max(top, level) else level = level + cost * unit end
  fit, cost, op, write = level <= capacity, 1, 'peek', true
end
local allowed = cost * unit <= capacity - level
local retry = 0
if not allowed then
  retry = floor((level + cost * unit - capacity + drain - 1) / drain)
  write = write or (op == 'take' and future and not quiet)
elseif op == 'take' then
  level, write = level + cost * unit, true
end
if write then
  local ms = math.max(floor((floor((level + drain - 1) / drain) + 999) / 1000), retain) + slack
  if pending then
    pending[#pending + 1] = {ka, struct.pack('<ddI6I6', now, level, unit, drain), ms}
  else
    redis.call('SET', ka, struct.pack('<ddI6I6', now, level, unit, drain), 'PX', ttl_text(ms))
  end
end
local count = floor((level + unit - 1) / unit)
local reset_at = now
if count > 0 then reset_at = now + floor((level - (count - 1) * unit + drain - 1) / drain) end
if fit ~= nil then allowed, retry = fit, fit and 0 or retry end -- a charge's answer
local r = {allowed and 1 or 0, count, reset_at, retry, now} -- box.lua returns it
