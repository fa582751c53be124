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
local last = redis.pcall('ZRANGE', ka, '-1', '-1', 'WITHSCORES')
if last.err then -- a key of another type
  redis.call('DEL', ka)
  last = {}
end
last = tonumber(last[2])
if last then -- the key's time: its latest acquisition's, the last lease's end less the lease
  local t = last - lease
  if t > now and t - now <= max_skew then now = t end
end
local member, live = at and int_text(at), string.format('(%d', now)
local held, allowed, first
if op == 'acquire' then -- the ended leases pruned, then counted
  redis.call('ZREMRANGEBYSCORE', ka, '-inf', num(now))
  held, allowed = redis.call('ZCARD', ka), true
  local ends = now + lease
  local ends_text = num(ends)
  if held < limit then
    if redis.call('ZADD', ka, 'NX', ends_text, member) == 1 then
      held = held + 1
    else -- held: renewed
      redis.call('ZADD', ka, 'XX', ends_text, member)
    end
  elseif redis.call('ZSCORE', ka, member) then -- held, at the limit: renewed
    redis.call('ZADD', ka, 'XX', ends_text, member)
  else
    allowed = false
  end
  if allowed then -- the key lives as long as its last lease
    redis.call('PEXPIRE', ka, ttl_text(math.max(math.floor((math.max(ends, last or 0) - now + 999) / 1000), retain) + slack))
  end
  first = redis.call('ZRANGE', ka, '0', '0', 'WITHSCORES')[2]
else -- the acquires prune: the leases ended are not counted
  if op == 'release' then redis.call('ZREM', ka, member) end
  held = redis.call('ZCOUNT', ka, live, '+inf')
  allowed = (op == 'release' and 1 or cost) <= limit - held -- a release: a peek of one, afterwards
  first = redis.call('ZRANGEBYSCORE', ka, live, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')[2]
end
local reset_at, retry = now, 0
if first then reset_at = tonumber(first) end
if not allowed then
  retry = lease -- more than the limit: until one could have been renewed and ended
  local k = held + (op == 'acquire' and 1 or cost) - limit -- the leases to end first
  if k <= held then
    retry = tonumber(redis.call('ZRANGEBYSCORE', ka, live, '+inf', 'WITHSCORES', 'LIMIT', num(k - 1), '1')[2]) - now
  end
end
return {allowed and 1 or 0, held, reset_at, retry, now}
