-- The algorithms, one function each (the rules: package algorithm). Each
-- decides a request of cost at now (µs) under its policy, for op 'take',
-- 'peek' or 'refund', and returns allowed (1 | 0; 2 for a refused refund),
-- count, reset_at (µs) and retry_after (µs). A refund returns what a peek of
-- cost 1 says afterwards. Writes set a TTL of the state's life or the
-- retention (ms), whichever is longer, plus slack (ms). Every number stays
-- an integer below 2^53: exact as a Lua number; numbers written into strings
-- are formatted with %.0f, exact too.

local function ceildiv(a, b) return math.floor((a + b - 1) / b) end

local function aligned(now, window)
  local r = math.fmod(now, window) -- exact, unlike a - floor(a/b)*b
  if r < 0 then r = r + window end
  return now - r
end

-- ttl is the TTL (ms) of state that matters for life µs more.
local function ttl(life, retain, slack)
  return math.max(ceildiv(math.max(life, 0), 1000), retain) + slack
end

-- Sliding-window log.
-- log   a sorted set of entries scored by their time; a member is "id" for
--       a request of cost 1, "id:cost" otherwise
-- meta  a hash: n = the counter that names entries, x = the sum of cost-1
--       over the entries, t = the newest entry's time
local function cost_of(member)
  local i = string.find(member, ':', 1, true)
  if i then return tonumber(string.sub(member, i + 1)) end
  return 1
end

-- stale_extra is the part of extra held by the entries of log at or before
-- cutoff (0 when extra is: every entry is one unit).
local function stale_extra(log, cutoff, extra)
  local x = 0
  if extra > 0 then
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)) do
      x = x + cost_of(member) - 1
    end
  end
  return x
end

-- add_entry adds an entry of cost at score under a member unique among the
-- entries of log: members are small integers, compact in a listpack; the
-- counter n proposes the next id in [1, span], and ZADD NX moves on past a
-- member still in use. The caller passes held >= the entries of log, so
-- span > held and a free id is found within span tries: the loop is bounded
-- whatever the stored data. It returns the new n.
local function add_entry(log, score, cost, held, n)
  local span = math.max(4096, 2 * held)
  for _ = 1, span do
    n = n % span + 1
    local member = tostring(n)
    if cost > 1 then member = member .. ':' .. cost end
    if redis.call('ZADD', log, 'NX', score, member) == 1 then return n end
  end
  error('ratelimit: no free member in the log ' .. log .. ': its state is corrupt')
end

-- prune drops the entries of log at or before cutoff, and returns extra
-- without their part (written to meta when it changed).
local function prune(log, meta, cutoff, extra)
  local pruned = stale_extra(log, cutoff, extra)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
  if pruned > 0 then
    extra = extra - pruned
    redis.call('HSET', meta, 'x', extra)
  end
  return extra
end

-- sliding decides on the log; own_clock says now is the server's TIME.
-- Beyond n, x and t, meta holds o and e. o is the time of the oldest entry,
-- or empty (no number: no time can be mistaken for it) when that is unknown
-- (after a refund or a re-timing) or was never written; whatever removes
-- entries without rewriting it exactly empties it, so an o above the cutoff
-- means the log holds nothing stale and its oldest entry is at o. e is when
-- both keys expire (ms, on the server's clock; empty when unknown). The
-- common take then counts with ZCARD alone, reads no entry for reset and
-- retry, and rarely renews the TTLs. Every loop ends: those over entries
-- stop at the end of the log, whatever the counts in meta say.
local function sliding(log, meta, now, limit, window, cost, op, retain, slack, own_clock)
  local cutoff = now - window -- an entry at t is in the window while t > cutoff
  local m = redis.call('HMGET', meta, 'n', 'x', 't', 'o', 'e')
  local seq, extra, newest = tonumber(m[1]) or 0, tonumber(m[2]) or 0, tonumber(m[3])
  local oldest, expires = tonumber(m[4]), tonumber(m[5])
  local count
  -- known: oldest is the time of the oldest entry (nil: the log is empty),
  -- and every entry is in the window.
  local known = false
  if op == 'take' and not (newest and newest > now) then -- the common case
    if not oldest or oldest <= cutoff then -- some entries may have left the window: prune, and find the oldest left
      extra = prune(log, meta, cutoff, extra)
      oldest = tonumber(redis.call('ZRANGE', log, 0, 0, 'WITHSCORES')[2])
      if m[4] and oldest and oldest ~= tonumber(m[4]) then
        redis.call('HSET', meta, 'o', oldest) -- kept exact for the next call, even if this one is denied
      end
    end
    count, known = redis.call('ZCARD', log) + extra, true
  else
    count = redis.call('ZCOUNT', log, cutoff + 1, '+inf') + extra - stale_extra(log, cutoff, extra)
    if op == 'refund' and cost > count then return 2, count, 0, 0 end
    if op ~= 'peek' then -- a take or a refund writes: re-time the future, prune
      if newest and newest > now then
        local future = redis.call('ZRANGEBYSCORE', log, string.format('(%.0f', now), '+inf')
        for i = 1, #future, 256 do
          local args = {}
          for j = i, math.min(i + 255, #future) do
            args[#args + 1] = now
            args[#args + 1] = future[j]
          end
          redis.call('ZADD', log, 'XX', unpack(args))
        end
        redis.call('HSET', meta, 't', now, 'o', '')
      end
      extra = prune(log, meta, cutoff, extra)
    end
  end

  local ttl_ms = ttl(window, retain, slack)
  if op == 'refund' then -- drop the newest units
    local n, k, rest, offset = cost, cost, nil, 0
    if extra > 0 then -- find how many of the newest entries hold them, 256 per call
      k = 0
      while n > 0 do
        local top = redis.call('ZREVRANGE', log, offset, offset + 255)
        if #top == 0 then break end -- the end of the log
        for i = 1, #top do
          local c = cost_of(top[i])
          k = k + 1
          if c > n then -- the rest of this entry stays, under a fresh member
            rest = {redis.call('ZSCORE', log, top[i]), c - n}
            extra, n = extra - n, 0
            break
          end
          extra, n = extra - (c - 1), n - c
          if n == 0 then break end
        end
        offset = offset + 256
      end
    end
    extra = math.max(extra, 0)
    redis.call('ZREMRANGEBYRANK', log, -k, -1)
    if rest then seq = add_entry(log, rest[1], rest[2], math.max(limit, count), seq) end
    redis.call('HSET', meta, 'n', seq, 'x', extra, 'o', '', 'e', '')
    redis.call('PEXPIRE', log, ttl_ms)
    redis.call('PEXPIRE', meta, ttl_ms)
    count, cost, op = count - cost, 1, 'peek'
  end

  local allowed = cost <= limit - count
  local retry = 0
  if not allowed then
    -- The entry holding the k-th oldest unit leaves when the request fits.
    local k = count + cost - limit
    retry = window
    if k <= count then
      local at
      if known and extra == 0 then -- every entry is one unit, and in the window
        if k == 1 then
          at = oldest or now
        else
          at = tonumber(redis.call('ZRANGE', log, k - 1, k - 1, 'WITHSCORES')[2]) or now
        end
      elseif extra - stale_extra(log, cutoff, extra) == 0 then -- every entry in the window is one unit
        at = tonumber(redis.call('ZRANGEBYSCORE', log, cutoff + 1, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)[2]) or now
      else
        local offset = 0
        while not at do
          local e = redis.call('ZRANGEBYSCORE', log, cutoff + 1, '+inf', 'WITHSCORES', 'LIMIT', offset, 128)
          if #e == 0 then at = now break end -- the end of the log: meta miscounted
          for i = 1, #e, 2 do
            k = k - cost_of(e[i])
            if k <= 0 then at = tonumber(e[i + 1]) break end
          end
          offset = offset + 128
        end
      end
      retry = math.min(at, now) + window - now
    end
  elseif op == 'take' then
    local empty = count == 0 -- every entry holds a unit at least: the log is gone
    seq = add_entry(log, now, cost, limit, seq)
    if cost > 1 then extra = extra + cost - 1 end
    count = count + cost
    if empty then oldest = now end
    if not known then oldest = nil end
    -- The keys must live ttl_ms - slack at least from now: renewed (to
    -- ttl_ms) unless they already do, by the server's clock.
    local now_ms = math.floor(now / 1000)
    if own_clock and not empty and expires and expires - now_ms >= ttl_ms - slack then
      redis.call('HSET', meta, 'n', seq, 't', now, 'x', extra, 'o', oldest or '')
    else
      redis.call('HSET', meta, 'n', seq, 't', now, 'x', extra, 'o', oldest or '', 'e', own_clock and now_ms + ttl_ms or '')
      redis.call('PEXPIRE', log, ttl_ms)
      redis.call('PEXPIRE', meta, ttl_ms)
    end
  end
  local reset_at = now
  if count > 0 then
    if known and oldest then
      reset_at = math.min(oldest, now) + window
    else
      local first = redis.call('ZRANGEBYSCORE', log, cutoff + 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if first[2] then reset_at = math.min(tonumber(first[2]), now) + window end
    end
  end
  return allowed and 1 or 0, count, reset_at, retry
end

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

-- Sliding window counter.
-- key  a string "start:prev:cur": the stored window's start (µs), the
--      previous window's count and the current one's
local function covered(e, window) return ceildiv((window - e) * 1000, window) end
local function weighted(p, k) return ceildiv(p * k, 1000) end
local function fits_after(p, m, window) -- the first e at which weighted(p, covered(e)) <= m
  if p <= m then return 0 end
  if m < 0 then return window end -- never (a cost over the limit): when p has slid out
  local a = math.floor(m * 1000 / p)
  return window - math.floor(a * window / 1000)
end

local function counter(key, now, limit, window, cost, op, retain, slack)
  local v = redis.call('GET', key)
  local start, prev, cur
  if v then
    local s, p, c = string.match(v, '^(%-?%d+):(%d+):(%d+)$')
    start, prev, cur = tonumber(s), tonumber(p), tonumber(c)
  end
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
    write = write or (op == 'take' and future)
  elseif op == 'take' then
    cur, count, write = cur + cost, count + cost, true
  end
  if write then
    redis.call('SET', key, string.format('%.0f:%.0f:%.0f', start, prev, cur),
      'PX', ttl(start + 2 * window - now, retain, slack))
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

-- GCRA.
-- key  a string "at:level:unit:drain": the bucket's level at time at, in
--      the units of the rate it was written under (a request weighs unit, a
--      µs drains drain)
local function gcra(key, now, burst, unit, drain, cost, op, retain, slack)
  local v = redis.call('GET', key)
  local level, future = 0, false
  if v then
    local a, l, u, d = string.match(v, '^(%-?%d+):(%d+):(%d+):(%d+)$')
    local at
    at, level, u, d = tonumber(a), tonumber(l), tonumber(u), tonumber(d)
    if level > 0 then
      if u ~= unit or d ~= drain then -- another rate: as many requests, at most a burst
        level = math.min(ceildiv(level, u), burst) * unit
      end
      if now > at then
        local elapsed = now - at
        if elapsed >= ceildiv(level, drain) then level = 0 else level = level - elapsed * drain end
      else
        future = now < at -- from the future: as if written now
      end
    end
  end
  local write = false
  if op == 'refund' then
    if cost > ceildiv(level, unit) then return 2, ceildiv(level, unit), 0, 0 end
    level = math.max(level - cost * unit, 0)
    cost, op, write = 1, 'peek', true
  end
  local capacity = burst * unit
  local allowed = cost * unit <= capacity - level
  local retry = 0
  if not allowed then
    retry = ceildiv(level + cost * unit - capacity, drain)
    write = write or (op == 'take' and future)
  elseif op == 'take' then
    level, write = level + cost * unit, true
  end
  if write then
    redis.call('SET', key, string.format('%.0f:%.0f:%.0f:%.0f', now, level, unit, drain),
      'PX', ttl(ceildiv(level, drain), retain, slack))
  end
  local count = ceildiv(level, unit)
  local reset_at = now
  if count > 0 then reset_at = now + ceildiv(level - (count - 1) * unit, drain) end
  return allowed and 1 or 0, count, reset_at, retry
end
-- One atomic step deciding one request, or several together (all admitted
-- and recorded, or none recorded).
-- KEYS  per request, its keys: the log and its meta hash for 'sw', the
--       state for the others (see keys.go; one hash tag for all on a cluster)
-- ARGV  slack (ms), then 8 per request: algorithm ('sw' | 'fw' | 'swc' |
--       'gcra'), op ('take' | 'peek' | 'refund'), now (µs, or '' for the
--       server's TIME), cost, retention (ms), then the policy: limit and
--       window (µs), or for 'gcra' burst, unit and drain (algorithm.Rate)
-- Returns 5 integers per request: allowed (0 | 1; 2 for a refused refund),
--       count, reset_at (µs), retry_after (µs), now (µs)
-- (algorithms.lua comes first.)
local slack = tonumber(ARGV[1])

local server_now -- read once: every request of one step is decided at one time

-- decide decides the request whose arguments start at ARGV[a] and whose keys
-- start at KEYS[k], with op. It returns allowed, count, reset_at,
-- retry_after, now and the index of the next request's keys.
local function decide(a, k, op)
  local alg, now, cost, retain = ARGV[a], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local p1, p2, p3 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local own_clock = not now
  if own_clock then
    if not server_now then
      if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
      local t = redis.call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = server_now
  end
  local allowed, count, reset_at, retry
  if alg == 'sw' then
    allowed, count, reset_at, retry = sliding(KEYS[k], KEYS[k + 1], now, p1, p2, cost, op, retain, slack, own_clock)
    return allowed, count, reset_at, retry, now, k + 2
  elseif alg == 'fw' then
    allowed, count, reset_at, retry = fixed(KEYS[k], now, p1, p2, cost, op, retain, slack)
  elseif alg == 'swc' then
    allowed, count, reset_at, retry = counter(KEYS[k], now, p1, p2, cost, op, retain, slack)
  else
    allowed, count, reset_at, retry = gcra(KEYS[k], now, p1, p2, p3, cost, op, retain, slack)
  end
  return allowed, count, reset_at, retry, now, k + 1
end

if #ARGV == 9 then -- one request: the common case
  local allowed, count, reset_at, retry, now = decide(2, 1, ARGV[3])
  return {allowed, count, reset_at, retry, now}
end

-- Several (TakeAll): peek at all; take all only if all would be admitted.
local function all(op)
  local out, k, every = {}, 1, true
  for a = 2, #ARGV, 8 do
    local allowed, count, reset_at, retry, now
    allowed, count, reset_at, retry, now, k = decide(a, k, op)
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed, count, reset_at, retry, now
    every = every and allowed == 1
  end
  return out, every
end
local out, every = all('peek')
if every then out = all('take') end
return out
