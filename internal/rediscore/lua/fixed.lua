-- Fixed window. ka (v, its value: state.lua): a string, the doubles start
-- of the stored window (µs) and count. p1, p2: limit, window (µs).
local limit, window = p1, p2
local start, count
if v and #v == 16 then start, count = struct.unpack('<dd', v) end
local valid = start and start >= 0 and start <= max_time and start % 1 == 0 and count >= 0 and count <= max_count and count % 1 == 0
if valid and start > now and start - now <= max_skew then now = start end -- the key's time
local ws = now - math.fmod(now, window) -- now's window (now >= 0; fmod is exact)
local future = false
if not valid or ws > start then
  start, count = ws, 0 -- no state, or a later window
elseif start > now then
  start, future = ws, true -- from the future: moved to now's window, count and all
end
local write, fit = false, nil
if op == 'refund' then
  if cost > count then return {2, count, 0, 0, now} end
  count, cost, op, write = count - cost, 1, 'peek', true
elseif op == 'undo' then -- while the admission's window counts
  if at >= start and count > 0 then count, write = count - math.min(cost, count), true end
  cost, op = 1, 'peek'
elseif op == 'charge' then -- past the limit if need be, by max_charge at most
  count = math.min(count + cost, limit + max_charge)
  fit, cost, op, write = count <= limit, 1, 'peek', true
end
local allowed = cost <= limit - count
local reset_at = start - math.fmod(start, window) + window -- the next window replaces this one there
local retry = 0
if not allowed then
  retry = reset_at - now
  write = write or (op == 'take' and future and not quiet)
elseif op == 'take' then
  count, write = count + cost, true
end
if write then
  local ms = math.max(math.floor((reset_at - now + 999) / 1000), retain) + slack
  if pending then
    pending[#pending + 1] = {ka, struct.pack('<dd', start, count), ms}
  else
    redis.call('SET', ka, struct.pack('<dd', start, count), 'PX', ttl_text(ms))
  end
end
if fit ~= nil then allowed, retry = fit, fit and 0 or retry end -- a charge's answer
local r = {allowed and 1 or 0, count, reset_at, retry, now} -- box.lua returns it
