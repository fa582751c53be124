-- Fixed window.
-- key  a hash: s = start of the stored window (µs), c = its count
local function fixed(key, now, limit, window, cost, op, retain, slack)
  local ws = aligned(now, window)
  local state = redis.call('HMGET', key, 's', 'c')
  local start, count = tonumber(state[1]), tonumber(state[2]) or 0
  local future = false
  if not start or ws > start then
    start, count = ws, 0 -- a later window
  elseif start > now then
    start, future = ws, true -- from the future: moved to now's window, count and all
  end
  local write = false
  if op == 'refund' then
    if cost > count then return 2, count, 0, 0 end
    count, cost, op, write = count - cost, 1, 'peek', true
  end
  local allowed = cost <= limit - count
  local reset_at = aligned(start, window) + window -- the next window replaces this one there
  local retry = 0
  if not allowed then
    retry = reset_at - now
    write = write or (op == 'take' and future)
  elseif op == 'take' then
    count, write = count + cost, true
  end
  if write then
    redis.call('HSET', key, 's', start, 'c', count)
    redis.call('PEXPIRE', key, ttl(reset_at - now, retain, slack))
  end
  return allowed and 1 or 0, count, reset_at, retry
end

