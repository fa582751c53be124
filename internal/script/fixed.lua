-- Fixed window.
-- k2  layout 2: a string, the doubles start of the stored window (µs), count
-- k1  layout 1: a hash, s = start, c = count
local function fixed1_read(k1)
  local state = redis.call('HMGET', k1, 's', 'c')
  if state[1] then return tonumber(state[1]) or 0 / 0, state[2] and tonumber(state[2]) or 0 end
end

local function fixed1_write(k1, ms, start, count)
  redis.call('HSET', k1, 's', start, 'c', count)
  redis.call('PEXPIRE', k1, ms)
end

local function fixed(k2, k1, l2, now, limit, window, _, cost, op, retain, slack)
  local ws = aligned(now, window)
  local moved, start, count = load(k2, k1, l2, '<dd', fixed1_read)
  if start and not (valid(start, 0, max_time) and valid(count, 0, max_count)) then start = nil end
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
    write = write or (op == 'take' and future and not quiet)
  elseif op == 'take' then
    count, write = count + cost, true
  end
  if write then
    save(k2, k1, l2, moved, ttl(reset_at - now, retain, slack), '<dd', fixed1_write, start, count)
  end
  return allowed and 1 or 0, count, reset_at, retry
end
