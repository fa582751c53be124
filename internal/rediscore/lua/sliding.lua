-- The sliding-window log of a limit over short_log (short.lua: the choice
-- of form): the commonest takes (take_on_meta) and every decision
-- (decide_log), over the parts in log.lua: its work is its sorted set's.

local decide_log

-- renewed writes the meta of a take at now (its numbers n, x, t, o and c)
-- and keeps both keys alive: their TTLs stand while they outlive the log's
-- TTL less slack on the server's clock (lives), and are renewed to it
-- otherwise, the log's after the meta's, so that the log is never outlived
-- by its meta's count.
local function renewed(log, meta, seq, extra, newest, oldest, entries, expires, now, window, retain, own_clock)
  local ttl_ms, now_ms = log_ttl(window, retain), (now - now % 1000) / 1000
  if lives(expires, now_ms, ttl_ms, own_clock) then
    redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest, oldest, expires, entries), 'KEEPTTL')
  else
    redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest, oldest, expiry(now_ms, ttl_ms, own_clock), entries), 'PX', ttl_text(ttl_ms))
    redis.call('PEXPIRE', log, ttl_text(ttl_ms))
  end
end

-- take_on_meta takes on a log whose meta v (GET's answer) tells the
-- answer: the commonest takes, decided in fewer steps than decide_log's
-- general ones. It answers nil, having written nothing, for any other
-- take (a denial, a meta none of ours or not knowing the count, a newest
-- entry from the future, entries of several units to prune), or when the
-- log is not a sorted set (sliding types it); decide_log decides those,
-- reading the meta parsed here again at no cost (read_meta keeps its last).
--
-- A log with entries in the window, whose count has room: the entry is
-- added and the meta written, the count trusted as decide_log trusts a
-- take's. Entries that left the window (the oldest at or before the
-- cutoff) are pruned first, when every entry is one unit and the take
-- fits the log before the prune: its count then is the meta's less those
-- removed, its oldest the newest when one is left, else read; a count the
-- log does not bear out (the two parted) drops the meta, and the take is
-- decided on the meta rebuilt from the log.
--
-- A log whose every entry has left the window (its newest at or before the
-- cutoff): the take is admitted, and its entry goes in before the stale
-- ones go, so that the log is never emptied: its TTL stands, renewed only
-- when too short, as after any take. Where the prune first would empty the
-- log, its TTL gone, this saves a PEXPIRE a call; and it reads no TYPE of
-- the log, its first command telling the type (docs/figures.md: "The
-- sliding log's stale take"). A prune that removes another number of
-- entries than the meta counts means the two parted: the entry is taken
-- out again, the meta dropped, and the take decided on the meta rebuilt
-- from the log. A log of one entry of one unit (a key idle for a window,
-- the commonest stale log), taken for one unit, has that entry re-timed to
-- now instead (ZADD XX CH of the member last added, n's: one command where
-- adding and pruning are two), its count trusted as a take's is; when the
-- member is not there, it is added and pruned as any.
local function take_on_meta(log, meta, v, now, cost, retain, limit, window, own_clock, at)
  local seq, extra, newest, oldest, expires, entries = read_meta(v)
  local cutoff = now - window
  if not seq or newest < 0 or newest > now or entries < 1 or cost > limit then return nil end
  if newest > cutoff then -- entries in the window
    local count = entries + extra
    if oldest > newest then return nil end
    if oldest <= cutoff then -- some have left (or o is unknown): pruned, where the take fits whatever is left
      if extra > 0 or cost > limit - entries then return nil end
      local removed = redis.pcall('ZREMRANGEBYSCORE', log, '-inf', num(cutoff))
      if type(removed) == 'table' and wrong_type(removed) then return nil end -- not a sorted set: sliding types the log
      count = entries - removed -- every entry one unit (extra is 0)
      if count == 1 then
        oldest = newest -- the one entry left is the newest
      elseif count > 1 then
        oldest = tonumber(redis.call('ZRANGE', log, '0', '0', 'WITHSCORES')[2])
      end
      if count < 1 or not oldest or oldest <= cutoff then -- the meta counted entries the log did not hold: they parted
        redis.call('DEL', meta)
        return decide_log(log, meta, 'take', now, cost, retain, limit, window, own_clock, at, false)
      end
      entries = count
    elseif cost > limit - count then
      return nil
    end
    seq = add_entry(log, now, cost, limit, seq)
    if not seq then return nil end -- not a sorted set (its first command): sliding types the log
    renewed(log, meta, seq, extra + cost - 1, now, oldest, entries + 1, expires, now, window, retain, own_clock)
    return {1, count + cost, oldest + window, 0, now}
  end
  local moved = 0
  if entries == 1 and extra == 0 and cost == 1 then
    moved = redis.pcall('ZADD', log, 'XX', 'CH', time_text(now), num(seq))
    if type(moved) == 'table' and wrong_type(moved) then return nil end -- not a sorted set: sliding types the log
  end
  if moved ~= 1 then
    local member
    seq, member = add_entry(log, now, cost, max_log + 1, seq) -- a log of ours holds at most max_log + 1 entries
    if not seq then return nil end -- not a sorted set: sliding types the log
    if redis.call('ZREMRANGEBYSCORE', log, '-inf', num(cutoff)) ~= entries then
      redis.call('ZREM', log, member)
      redis.call('DEL', meta)
      return decide_log(log, meta, 'take', now, cost, retain, limit, window, own_clock, at, false)
    end
  end
  renewed(log, meta, seq, cost - 1, now, now, 1, expires, now, window, retain, own_clock)
  return {1, cost, now + window, 0, now}
end

-- decide_log decides on the log; own_clock is common.lua's clock_of's;
-- v is the meta as GET answered it, or nil when it is yet to be read.
-- Beyond n, x and t, meta holds o, e and c, each -1 when unknown (no time
-- or count can be mistaken for it). o is the time of the oldest entry
-- (unknown after a refund or a re-timing); whatever removes entries without
-- rewriting it exactly empties it, so an o above the cutoff means the log
-- holds nothing stale and its oldest entry is at o. c is the number of
-- entries: whatever adds or removes entries rewrites it or empties it. e is
-- when both keys expire (ms, on the server's clock). The common take then
-- reads the meta, prunes only once its oldest entry has left the window
-- (counting what ZREMRANGEBYSCORE says it removed), adds its entry, and
-- writes the meta once, in 4 to 6 commands; it reads no entry for reset
-- and retry, and rarely renews the TTLs. Every loop ends: those over
-- entries stop at the end of the log, whatever the counts in meta say.
--
-- The two keys may part (a server under maxmemory evicts one, someone
-- deletes one): the log is the truth and the meta is rebuilt from it when
-- it is missing or none of ours, and when a take the meta's count would
-- deny finds the log holding another number of entries; no meta's count
-- is trusted past that denial.
--
-- A take writes nothing before its first command on the log, so that it
-- may run on a log of unknown type (sliding saves its TYPE so): a key of
-- another type raises WRONGTYPE there, having changed nothing.
function decide_log(log, meta, op, now, cost, retain, limit, window, own_clock, at, v)
  local wall = now -- the clock's own time: the TTLs' (now may become the key's)
  if v == nil then v = redis.pcall('GET', meta) end
  local seq, extra, newest, oldest, expires, entries = read_meta(v)
  if not seq then
    -- no meta, or a number that is none of ours: rebuilt from the log
    local x, t, o, c = rebuild(log)
    if not x then -- nor is the log ours: no state, as on a fresh key
      if op == 'peek' then return {1, 0, now, 0, now} end -- a fresh key admits any cost (at most the limit)
      redis.call('DEL', log, meta)
      x, t, o, c = 0, -1, -1, 0
    end
    v, seq, extra, newest, oldest, expires, entries = false, 0, x, t, o, -1, c
  end
  local ttl_ms = log_ttl(window, retain)
  -- nil: unknown
  if newest < 0 then newest = nil end
  if oldest < 0 or (newest and oldest > newest) then oldest = nil end -- inconsistent: unknown
  if expires < 0 then expires = nil end
  if entries < 0 then entries = nil end
  if newest and newest > now and newest - now <= max_skew then now = newest end -- the key's time
  local cutoff = now - window -- an entry at t is in the window while t > cutoff
  local count
  -- known: oldest is the time of the oldest entry (nil: the log is empty),
  -- entries their number, and every entry is in the window.
  local known, pruned, checked, counted = false, false, false, false
  local charge_fit -- a charge's: whether it fit in the quota
  if op == 'take' and not (newest and newest > now) then -- the common case
    while true do
      if not oldest or oldest <= cutoff then -- some entries may have left the window: prune, and find the oldest left
        local removed
        extra, removed = prune(log, cutoff, extra)
        if entries and entries >= removed then
          entries = entries - removed
        else
          entries, counted = redis.call('ZCARD', log), true
        end
        oldest = nil
        if entries == 1 and newest and newest > cutoff then
          oldest = newest -- the one entry left is the newest
        elseif entries > 0 then
          oldest = tonumber(redis.call('ZRANGE', log, '0', '0', 'WITHSCORES')[2])
        end
        pruned = true
      elseif not entries then
        entries, counted = redis.call('ZCARD', log), true
      end
      count, known = entries + extra, true
      if checked or cost <= limit - count then break end
      -- A denial by the meta's count: the log must hold as many entries,
      -- or the two parted (O(1) to check; rebuilt, and decided again). A
      -- count the meta did not know (after a refund) leaves its extra units
      -- unchecked: they are counted again from the log, once.
      checked = true
      if redis.call('ZCARD', log) == entries and not (counted and extra > 0) then break end
      local x, t, o, c = rebuild(log)
      if not x then
        redis.call('DEL', log, meta)
        x, t, o, c = 0, -1, -1, 0
      end
      v, extra, newest, oldest, expires, entries = false, x, t, o, nil, c
      if newest < 0 then newest = nil end
      if oldest < 0 then oldest = nil end
      pruned = true -- the meta is written, though this call be denied
    end
  else
    if redis.call('ZCARD', log) > max_log + 1 then -- more entries than any limit's (and a charge's one more): none of ours
      if op == 'peek' then return {1, 0, now, 0, now} end
      redis.call('DEL', log, meta)
      v, seq, extra, newest, oldest, expires, entries = false, 0, 0, nil, nil, nil, 0
    end
    count = redis.call('ZCOUNT', log, num(cutoff + 1), '+inf') + extra - stale_extra(log, cutoff, extra)
    if op == 'refund' and cost > count then return {2, count, 0, 0, now} end
    if op ~= 'peek' and not (quiet and op == 'take' and cost > limit - count) then -- a take or a refund writes: re-time the future, prune
      if newest and newest > now then
        local now_text = num(now)
        local future = redis.call('ZRANGEBYSCORE', log, '(' .. int_text(now), '+inf')
        for i = 1, #future, 256 do
          local args = {}
          for j = i, math.min(i + 255, #future) do
            args[#args + 1] = now_text
            args[#args + 1] = future[j]
          end
          redis.call('ZADD', log, 'XX', unpack(args))
        end
        newest = now
      end
      extra = prune(log, cutoff, extra)
      local packed = struct.pack('<dddddd', seq, extra, newest or -1, -1, expires or -1, -1)
      if v then redis.call('SET', meta, packed, 'KEEPTTL') else redis.call('SET', meta, packed, 'PX', ttl_text(ttl_ms)) end
    end
  end

  if op == 'refund' then -- drop the newest units
    local n, k, rest, offset = cost, cost, nil, 0
    if extra > 0 then -- find how many of the newest entries hold them, 256 per call
      k = 0
      while n > 0 do
        local top = redis.call('ZREVRANGE', log, num(offset), num(offset + 255))
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
    if k > 0 then redis.call('ZREMRANGEBYRANK', log, num(-k), '-1') end -- (-0 is no rank: a meta that miscounted)
    if rest then seq = add_entry(log, rest[1], rest[2], math.max(limit, count), seq) end
    newest = tonumber(redis.call('ZRANGE', log, '-1', '-1', 'WITHSCORES')[2]) -- the key's time is the newest left's
    redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest or -1, -1, -1, -1), 'PX', ttl_text(ttl_ms))
    redis.call('PEXPIRE', log, ttl_text(ttl_ms)) -- after: the log is never outlived by its meta's count
    count, cost, op = count - cost, 1, 'peek'
  elseif op == 'undo' then -- drop up to cost units of the entries recorded at at
    local members, n = redis.call('ZRANGEBYSCORE', log, num(at), num(at)), cost
    for i = #members, 1, -1 do
      if n == 0 then break end
      local c = cost_of(members[i])
      redis.call('ZREM', log, members[i])
      if c > n then -- the rest of this entry stays, under a fresh member
        seq = add_entry(log, at, c - n, math.max(limit, count) + 1, seq)
        extra, count, n = extra - n, count - n, 0
      else
        extra, count, n = extra - (c - 1), count - c, n - c
      end
    end
    extra = math.max(extra, 0)
    if n < cost then
      newest = tonumber(redis.call('ZRANGE', log, '-1', '-1', 'WITHSCORES')[2])
      redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest or -1, -1, -1, -1), 'PX', ttl_text(ttl_ms))
      redis.call('PEXPIRE', log, ttl_text(ttl_ms))
    end
    cost, op = 1, 'peek'
  elseif op == 'charge' then -- recorded whatever the quota; the oldest units past limit + 1 go
    charge_fit = cost <= limit - count
    local c = math.min(cost, limit + 1) -- a log keeps limit + 1 units at most: more would go at once
    seq = add_entry(log, now, c, math.max(limit, count) + 1, seq)
    if c > 1 then extra = extra + c - 1 end
    local excess, k, rest, offset = count + c - limit - 1, 0, nil, 0
    count = count + c
    while excess > 0 do -- from the oldest, 256 entries a call; the newest, c's, stays
      local e = redis.call('ZRANGE', log, num(offset), num(offset + 255), 'WITHSCORES')
      if #e == 0 then break end -- the end of the log
      for i = 1, #e, 2 do
        local ci = cost_of(e[i])
        k = k + 1
        if ci > excess then -- the rest of this entry stays, under a fresh member
          rest = {e[i + 1], ci - excess}
          extra, count, excess = extra - excess, count - excess, 0
          break
        end
        extra, count, excess = extra - (ci - 1), count - ci, excess - ci
        if excess == 0 then break end
      end
      offset = offset + 256
    end
    extra = math.max(extra, 0)
    if k > 0 then redis.call('ZREMRANGEBYRANK', log, '0', num(k - 1)) end
    if rest then seq = add_entry(log, tonumber(rest[1]), rest[2], math.max(limit, count) + 1, seq) end
    redis.call('SET', meta, struct.pack('<dddddd', seq, extra, now, -1, -1, -1), 'PX', ttl_text(ttl_ms))
    redis.call('PEXPIRE', log, ttl_text(ttl_ms)) -- after: the log is never outlived by its meta's count
    newest, known, cost, op = now, false, 1, 'peek'
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
          at = tonumber(redis.call('ZRANGE', log, num(k - 1), num(k - 1), 'WITHSCORES')[2]) or now
        end
      elseif extra - stale_extra(log, cutoff, extra) == 0 then -- every entry in the window is one unit
        at = tonumber(redis.call('ZRANGEBYSCORE', log, num(cutoff + 1), '+inf', 'WITHSCORES', 'LIMIT', num(k - 1), '1')[2]) or now
      else
        at = unit_at(log, cutoff, k, count) or now
      end
      retry = math.min(at, now) + window - now
    end
    if pruned then -- kept exact for the next call, though this one is denied
      if v then
        redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest or -1, oldest or -1, expires or -1, entries), 'KEEPTTL')
      else -- a new meta: both keys get one TTL, so its count holds as long as the log
        local e = expiry(math.floor(wall / 1000), ttl_ms, own_clock)
        redis.call('SET', meta, struct.pack('<dddddd', seq, extra, newest or -1, oldest or -1, e, entries), 'PX', ttl_text(ttl_ms))
        redis.call('PEXPIRE', log, ttl_text(ttl_ms)) -- after: the log is never outlived by its meta's count
      end
    end
  elseif op == 'take' then
    local empty = count == 0 -- every entry holds a unit at least: the log is gone
    local err
    seq, err = add_entry(log, now, cost, limit, seq)
    if not seq then error(err) end -- nothing written yet: sliding types the log
    if cost > 1 then extra = extra + cost - 1 end
    count = count + cost
    if empty then oldest = now end
    local c = -1
    if known then c = entries + 1 else oldest = nil end
    -- The keys must live ttl_ms - slack at least from now: renewed (to
    -- ttl_ms) unless they already do, by the server's clock.
    local now_ms = math.floor(wall / 1000)
    if not empty and expires and lives(expires, now_ms, ttl_ms, own_clock) then
      redis.call('SET', meta, struct.pack('<dddddd', seq, extra, now, oldest or -1, expires, c), 'KEEPTTL')
    else
      redis.call('SET', meta, struct.pack('<dddddd', seq, extra, now, oldest or -1, expiry(now_ms, ttl_ms, own_clock), c), 'PX', ttl_text(ttl_ms))
      redis.call('PEXPIRE', log, ttl_text(ttl_ms)) -- after: the log is never outlived by its meta's count
    end
  end
  local reset_at = now
  if count > 0 then
    if known and oldest then
      reset_at = math.min(oldest, now) + window
    else
      local first = redis.call('ZRANGEBYSCORE', log, num(cutoff + 1), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
      if first[2] then reset_at = math.min(tonumber(first[2]), now) + window end
    end
  end
  if charge_fit ~= nil then allowed, retry = charge_fit, charge_fit and 0 or retry end -- a charge's answer
  return {allowed and 1 or 0, count, reset_at, retry, now}
end
