-- The algorithms, one function each (the rules: package algorithm). Each
-- decides a request of cost at now (µs) under limit per window (µs), records
-- it only when record is true and it is admitted, and returns allowed
-- (boolean), count, reset_at (µs) and retry_after (µs). Writes set a TTL of
-- the window plus slack (ms). Times are integers below 2^53: exact as Lua
-- numbers, and redis.call passes numbers on exactly.

-- The time of the k-th oldest entry of log later than cutoff.
local function nth(log, cutoff, k)
  local e = redis.call('ZRANGEBYSCORE', log, cutoff + 1, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  return tonumber(e[2])
end

-- Sliding-window log.
-- log  a sorted set of entries scored by their time
-- seq  the counter that names entries (same hash tag as log)
local function sliding(log, seq, now, limit, window, cost, record, slack)
  local cutoff = now - window -- an entry at t is in the window while t > cutoff
  local count
  if record then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
    count = redis.call('ZCARD', log)
  else
    count = redis.call('ZCOUNT', log, cutoff + 1, '+inf') -- a peek writes nothing
  end
  local allowed = count + cost <= limit
  local retry = 0
  if not allowed then
    local k = count + cost - limit
    if k > count then retry = window else retry = nth(log, cutoff, k) + window - now end
  elseif record then
    -- Members are small integers, compact in a listpack, unique among the
    -- entries: the counter proposes the next id in [1, span], and ZADD NX
    -- moves on past an id still in use (span > limit, so one is free).
    local span = math.max(4096, 2 * limit)
    local id = redis.call('INCRBY', seq, cost) - cost
    for _ = 1, cost do
      repeat
        id = id % span + 1
      until redis.call('ZADD', log, 'NX', now, id) == 1
    end
    count = count + cost
    local ttl = math.ceil(window / 1000) + slack
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', seq, ttl)
  end
  local reset_at = now
  if count > 0 then reset_at = nth(log, cutoff, 1) + window end
  return allowed, count, reset_at, retry
end

-- Fixed window.
-- key  a hash: s = start of the stored window (µs), c = its count
local function fixed(key, now, limit, window, cost, record, slack)
  local r = math.fmod(now, window) -- exact, unlike a - floor(a/b)*b
  if r < 0 then r = r + window end
  local ws = now - r
  local state = redis.call('HMGET', key, 's', 'c')
  local start, count = tonumber(state[1]), tonumber(state[2]) or 0
  if not start or ws > start then
    start, count = ws, 0 -- a later window; a late request counts in the stored one
  end
  local allowed = count + cost <= limit
  local reset_at = start + window
  local retry = 0
  if not allowed then
    retry = reset_at - now
  elseif record then
    count = count + cost
    redis.call('HSET', key, 's', start, 'c', count)
    redis.call('PEXPIRE', key, math.ceil((reset_at - now) / 1000) + slack)
  end
  return allowed, count, reset_at, retry
end
