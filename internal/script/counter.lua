-- Sliding window counter.
-- k2  layout 2: a string, the doubles start of the stored window (µs), the
--     previous window's count and the current one's
-- k1  layout 1: a string "start:prev:cur"
local function counter1_read(k1)
  local v = redis.call('GET', k1)
  if v then
    local s, p, c = string.match(v, '^(%-?%d+):(%d+):(%d+)$')
    return tonumber(s) or 0 / 0, tonumber(p), tonumber(c)
  end
end

local function counter1_write(k1, ms, start, prev, cur)
  redis.call('SET', k1, string.format('%.0f:%.0f:%.0f', start, prev, cur), 'PX', ms)
end

local function covered(e, window) return ceildiv((window - e) * 1000, window) end
local function weighted(p, k) return ceildiv(p * k, 1000) end
local function fits_after(p, m, window) -- the first e at which weighted(p, covered(e)) <= m
  if p <= m then return 0 end
  if m < 0 then return window end -- never (a cost over the limit): when p has slid out
  local a = math.floor(m * 1000 / p)
  return window - math.floor(a * window / 1000)
end

local function counter(k2, k1, l2, now, limit, window, _, cost, op, retain, slack)
  local moved, start, prev, cur = load(k2, k1, l2, '<ddd', counter1_read)
  if start and not (valid(start, 0, max_time) and valid(prev, 0, max_count) and valid(cur, 0, max_count)) then start = nil end
  local future = false
  if not start then
    start, prev, cur = aligned(now, window), 0, 0
  elseif start > now then
    start, future = aligned(now, window), true -- from the future: moved to now's window
  elseif now < start + window then
    -- the stored window
  elseif now < start + 2 * window then
    start, prev, cur = start + window, cur, 0
  else
    start, prev, cur = aligned(now, window), 0, 0
  end
  local write = false
  if op == 'refund' then
    if cost > cur + prev then return 2, weighted(prev, covered(now - start, window)) + cur, 0, 0 end
    local from_cur = math.min(cost, cur)
    cur, prev = cur - from_cur, prev - (cost - from_cur)
    cost, op, write = 1, 'peek', true
  end
  local count = weighted(prev, covered(now - start, window)) + cur
  local allowed = cost <= limit - count
  local retry = 0
  if not allowed then
    local m = limit - cur - cost
    if m >= 0 then
      retry = start + fits_after(prev, m, window) - now
    else
      retry = start + window + fits_after(cur, limit - cost, window) - now
    end
    write = write or (op == 'take' and future and not quiet)
  elseif op == 'take' then
    cur, count, write = cur + cost, count + cost, true
  end
  if write then
    save(k2, k1, l2, moved, ttl(start + 2 * window - now, retain, slack), '<ddd', counter1_write, start, prev, cur)
  end
  local reset_at = now
  local wp = weighted(prev, covered(now - start, window))
  if wp > 0 then
    reset_at = start + fits_after(prev, wp - 1, window)
  elseif cur > 0 then
    reset_at = start + window + fits_after(cur, cur - 1, window)
  end
  return allowed and 1 or 0, count, reset_at, retry
end

