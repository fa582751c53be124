-- Sliding-window log: one atomic decision (the rules: package algorithm).
-- KEYS[1]  the log: a sorted set of entries scored by their time in µs
-- KEYS[2]  the counter that names entries (same hash tag as KEYS[1])
-- Returns  {allowed (0|1), count, reset_at (µs), retry_after (µs), now (µs)}
-- (prelude.lua comes first: limit, window, cost, slack, now.)
local log, seq = KEYS[1], KEYS[2]
-- An entry at t is in the window while t > cutoff.
local cutoff = now - window

local count
if cost > 0 then
  redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
  count = redis.call('ZCARD', log)
else
  count = redis.call('ZCOUNT', log, cutoff + 1, '+inf') -- a peek writes nothing
end

-- The time of the k-th oldest entry in the window.
local function nth(k)
  local e = redis.call('ZRANGEBYSCORE', log, cutoff + 1, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  return tonumber(e[2])
end

local n = math.max(cost, 1)
local allowed = count + n <= limit
local retry = 0
if not allowed then
  local k = count + n - limit
  if k > count then retry = window else retry = nth(k) + window - now end
elseif cost > 0 then
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
if count > 0 then reset_at = nth(1) + window end
return {allowed and 1 or 0, count, reset_at, retry, now}
