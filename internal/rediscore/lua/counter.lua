-- Sliding window counter. ka (v, its value: state.lua): a string, the
-- doubles start of the stored window (µs), the previous window's count and
-- the current one's. p1, p2: limit, window (µs). The previous window weighs
-- the part of it the sliding window still covers, in thousandths:
-- ceil((window - e) * 1000 / window) at e µs into the current one, its
-- count ceil(prev * that / 1000). A count p weighs at most m from e =
-- window - floor(floor(m * 1000 / p) * window / 1000) into its next window
-- on (0 once p <= m).
local limit, window = p1, p2
local start, prev, cur
if v and #v == 24 then start, prev, cur = struct.unpack('<ddd', v) end
local future = false
local valid = start and start >= 0 and start <= max_time and start % 1 == 0 and prev >= 0 and prev <= max_count and prev % 1 == 0
    and cur >= 0 and cur <= max_count and cur % 1 == 0
if valid and start > now and start - now <= max_skew then now = start end -- the key's time
if not valid then
  start, prev, cur = now - math.fmod(now, window), 0, 0
elseif start > now then
  start, future = now - math.fmod(now, window), true -- from the future: moved to now's window
elseif now < start + window then
  -- the stored window
elseif now < start + 2 * window then
  start, prev, cur = start + window, cur, 0
else
  start, prev, cur = now - math.fmod(now, window), 0, 0
end
local covered = math.floor(((window - (now - start)) * 1000 + window - 1) / window)
local write, fit = false, nil
if op == 'refund' then
  if cost > cur + prev then return {2, math.floor((prev * covered + 999) / 1000) + cur, 0, 0, now} end
  local from_cur = math.min(cost, cur)
  cur, prev = cur - from_cur, prev - (cost - from_cur)
  cost, op, write = 1, 'peek', true
elseif op == 'undo' then -- from the window the admission was counted in, while it weighs
  if at >= start and cur > 0 then
    cur, write = cur - math.min(cost, cur), true
  elseif at < start and at >= start - window and prev > 0 then
    prev, write = prev - math.min(cost, prev), true
  end
  cost, op = 1, 'peek'
elseif op == 'charge' then -- past the limit if need be, by max_charge at most
  cur, cost, op, write = math.min(cur + cost, limit + max_charge), 1, 'peek', true
  fit = math.floor((prev * covered + 999) / 1000) + cur <= limit
end
local wp = math.floor((prev * covered + 999) / 1000) -- the previous window's weight
local count = wp + cur
local allowed = cost <= limit - count
local retry = 0
if not allowed then
  local m = limit - cur - cost
  if m >= 0 then -- when the previous window weighs m at most
    local e = 0
    if prev > m then e = window - math.floor(math.floor(m * 1000 / prev) * window / 1000) end
    retry = start + e - now
  else -- when the current window, become the previous one, weighs limit - cost at most
    m = limit - cost
    local e = window -- never (a cost over the limit): once it has slid out
    if cur <= m then e = 0 elseif m >= 0 then e = window - math.floor(math.floor(m * 1000 / cur) * window / 1000) end
    retry = start + window + e - now
  end
  write = write or (op == 'take' and future and not quiet)
elseif op == 'take' then
  cur, count, write = cur + cost, count + cost, true
end
if write then
  local ms = math.max(math.floor((start + 2 * window - now + 999) / 1000), retain) + slack
  if pending then
    pending[#pending + 1] = {ka, struct.pack('<ddd', start, prev, cur), ms}
  else
    redis.call('SET', ka, struct.pack('<ddd', start, prev, cur), 'PX', ttl_text(ms))
  end
end
local reset_at = now -- when the count falls by one
if wp > 0 then
  reset_at = start + window - math.floor(math.floor((wp - 1) * 1000 / prev) * window / 1000)
elseif cur > 0 then
  reset_at = start + 2 * window - math.floor(math.floor((cur - 1) * 1000 / cur) * window / 1000)
end
if fit ~= nil then allowed, retry = fit, fit and 0 or retry end -- a charge's answer
local r = {allowed and 1 or 0, count, reset_at, retry, now} -- box.lua returns it
