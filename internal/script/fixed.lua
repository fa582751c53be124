-- Fixed window: one atomic decision (the rules: package algorithm).
-- KEYS[1]  a hash: s = start of the stored window (µs), c = its count
-- Returns  {allowed (0|1), count, reset_at (µs), retry_after (µs), now (µs)}
-- (prelude.lua comes first: limit, window, cost, slack, now.)
local key = KEYS[1]

local r = math.fmod(now, window) -- exact, unlike a - floor(a/b)*b
if r < 0 then r = r + window end
local ws = now - r
local state = redis.call('HMGET', key, 's', 'c')
local start, count = tonumber(state[1]), tonumber(state[2]) or 0
if not start or ws > start then
  start, count = ws, 0 -- a later window; a late request counts in the stored one
end

local n = math.max(cost, 1)
local allowed = count + n <= limit
local reset_at = start + window
local retry = 0
if not allowed then
  retry = reset_at - now
elseif cost > 0 then
  count = count + cost
  redis.call('HSET', key, 's', start, 'c', count)
  redis.call('PEXPIRE', key, math.ceil((reset_at - now) / 1000) + slack)
end
return {allowed and 1 or 0, count, reset_at, retry, now}
