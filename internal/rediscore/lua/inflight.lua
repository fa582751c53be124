-- In flight: at most limit permits of a key held at once, each a lease.
-- ka: a sorted set of the holders' ids (integers in [1, max_stored]), each
-- scored by when its lease ends (µs). p1, p2: limit, the lease (µs). op
-- 'acquire' takes a permit as at (the id; an id held is renewed, whatever
-- is free), 'release' gives it back, 'peek' says how many are held. The
-- answer: allowed, the permits held, when the first lease ends, the retry
-- after a denial (until a lease ends), now. A member that is no id of ours
-- still holds its permit until its score passes (a key written by hand is
-- never a way to more permits); a key of another type is no state.
local limit, lease = p1, p2
local kind = redis.call('TYPE', ka).ok
if kind ~= 'zset' and kind ~= 'none' then redis.call('DEL', ka) end
local last = redis.call('ZRANGE', ka, -1, -1, 'WITHSCORES')[2]
if last then -- the key's time: its latest acquisition's, the last lease's end less the lease
  local t = tonumber(last) - lease
  if t > now and t - now <= max_skew then now = t end
end
local member = at and string.format('%.0f', at)
local write = false
if op ~= 'peek' then
  write = redis.call('ZREMRANGEBYSCORE', ka, '-inf', now) > 0 -- the leases ended
end
local held = redis.call('ZCOUNT', ka, string.format('(%.0f', now), '+inf')
local allowed = true
if op == 'acquire' then
  if redis.call('ZSCORE', ka, member) then -- held: renewed
    redis.call('ZADD', ka, 'XX', now + lease, member)
    write = true
  elseif held < limit then
    redis.call('ZADD', ka, now + lease, member)
    held, write = held + 1, true
  else
    allowed = false
  end
elseif op == 'release' then
  if redis.call('ZREM', ka, member) == 1 then held, write = held - 1, true end
  allowed = held + 1 <= limit -- a peek of one, afterwards
else
  allowed = cost <= limit - held
end
local first = redis.call('ZRANGEBYSCORE', ka, string.format('(%.0f', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
local reset_at, retry = now, 0
if first then reset_at = tonumber(first) end
if not allowed then
  retry = lease -- more than the limit: until one could have been renewed and ended
  local k = held + (op == 'acquire' and 1 or cost) - limit -- the leases to end first
  if k <= held then
    retry = tonumber(redis.call('ZRANGEBYSCORE', ka, string.format('(%.0f', now), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)[2]) - now
  end
end
if write then
  local ends = tonumber(redis.call('ZRANGE', ka, -1, -1, 'WITHSCORES')[2] or now)
  redis.call('PEXPIRE', ka, math.max(math.floor((ends - now + 999) / 1000), retain) + slack)
end
return {allowed and 1 or 0, held, reset_at, retry, now}
