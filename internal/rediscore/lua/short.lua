-- The short sliding log, and the choice between the two forms of a log.
-- A log whose limit is at most short_log is one string at the log's key:
-- a header of the units' number and the newest's time, then the times (µs)
-- of its units, oldest first, all little-endian doubles, a request of cost
-- c being c units at one time. A denial reads the header and the oldest
-- unit (short_denied); a take that may admit reads the log and writes it
-- whole: TIME, GETRANGE, GET, SET, where the sorted set and its meta
-- (sliding.lua) take four to six commands; and its bytes are 8 a unit,
-- where a sorted set past 128 entries leaves its compact encoding.
-- Copying the string costs what the sorted set's commands save up to a
-- couple of hundred units, so a longer log keeps the sorted set
-- (docs/figures.md). A key moves to the other form, every entry in the
-- window kept, when a rule of the other form first decides it (a live
-- change of the limit across short_log); to a short log only once it holds
-- at most short_log units.
local short_log = SHORT_LOG -- script.ShortLog

-- unit is the time of the i-th unit of the short log v, or nil when the
-- bytes there hold no time of ours.
local function unit(v, i)
  local x = struct.unpack('<d', v, i * 8 - 7)
  if x >= 0 and x <= max_time and x % 1 == 0 then return x end
end

-- short_units is the units of s, a short log as stored (GET's answer: false
-- for none), and whether they must be healed: a header that does not tell
-- the units after it (another number, another newest) is none of ours,
-- and every byte of s is taken for units, healed (short_heal), so that any
-- time it holds still counts: a log never frees quota sooner than what it
-- recorded, and a log written without a header reads as it was.
local function short_units(s)
  if type(s) ~= 'string' or #s == 0 then return '', false end
  if #s >= 24 and #s % 8 == 0 then
    local n, newest = struct.unpack('<dd', s)
    if n == #s / 8 - 2 and newest == unit(s, n + 2) then return string.sub(s, 17), false end
  end
  return s, true
end

-- short_set writes the units v (not empty) at log, behind their header.
local function short_set(log, v, ttl_ms)
  local n = #v / 8
  redis.call('SET', log, struct.pack('<dd', n, struct.unpack('<d', v, #v - 7)) .. v, 'PX', ttl_text(ttl_ms))
end

-- decide_short decides on the units v of the short log at log ('' for none).
-- Stored bytes are distrusted as elsewhere: a length that is no whole
-- number of units, or any unit read that holds no time (or one out of
-- order where the answer depends on it), makes v corrupt: it is healed
-- (short_heal) and the request decided on what is left, which a take
-- writes back. Every unit is read before anything is written; no loop runs
-- past the end of v.
local decide_short

-- short_heal is v with every unit a time, in order: a unit that holds no
-- time is taken as a request at the next unit's time (or now, for the
-- last), which it cannot be later than, so a healed log never frees quota
-- sooner than the requests it recorded would (dropping every unit once a
-- bad one came to light let a key admit again what it had admitted: 7 in
-- a window at 5 per second); then the units are sorted. A string longer
-- than any log's is none of ours: ''.
local function short_heal(v, now)
  local n = math.floor(#v / 8)
  if n > 2 * max_log then return '' end
  local times, later = {}, now
  for i = n, 1, -1 do
    local x = unit(v, i) or later
    times[i], later = x, x
  end
  table.sort(times)
  local parts = {}
  for i = math.max(1, n - max_log + 1), n do parts[#parts + 1] = struct.pack('<d', times[i]) end
  return table.concat(parts)
end

-- short_healed decides on v healed, which a take writes back.
local function short_healed(log, op, now, cost, retain, limit, window, v, at)
  return decide_short(log, op, now, cost, retain, limit, window, short_heal(v, now), true, at)
end

function decide_short(log, op, now, cost, retain, limit, window, v, healed, at)
  local n = #v / 8
  local first, oldest, newest = 1, nil, nil -- first: the oldest unit in the window
  local valid = n % 1 == 0 and n <= max_log
  if valid and n > 0 then
    newest = unit(v, n)
    valid = newest ~= nil
    if valid and newest > now and newest - now <= max_skew then now = newest end -- the key's time
  end
  local cutoff = now - window -- a unit at t is in the window while t > cutoff
  if valid and n > 0 then
    while valid and first <= n do
      local x = unit(v, first)
      if not x or x > newest then
        valid = false
      elseif x > cutoff then
        oldest = x
        break
      else
        first = first + 1
      end
    end
  end
  if not valid then return short_healed(log, op, now, cost, retain, limit, window, v, at) end
  local count = n - first + 1
  if op == 'refund' and cost > count then return {2, count, 0, 0, now} end

  local body = v -- v, its units from the future re-timed to now
  local keep = n -- the units the write keeps end here
  if op == 'take' and cost <= limit - count then keep = n + cost end
  if newest and newest > now and op ~= 'peek' and not (quiet and op == 'take' and keep == n) then
    -- the clock went back (another instance's, or a step): whatever a write
    -- keeps is re-timed to now, as if it had been written now
    local j = n
    while j >= first do
      local x = unit(v, j)
      if not x then return short_healed(log, op, now, cost, retain, limit, window, v, at) end
      if x <= now then break end
      j = j - 1
    end
    body = string.sub(v, 1, j * 8) .. string.rep(struct.pack('<d', now), n - j)
    newest, oldest = now, math.min(oldest, now)
  end

  if op == 'charge' or op == 'undo' then
    local kept
    if op == 'charge' then -- recorded whatever the quota; the oldest units past limit + 1 go
      local c = math.min(cost, limit + 1) -- more would go at once
      local from = first + math.max(count + c - limit - 1, 0)
      kept = string.sub(body, from * 8 - 7, n * 8) .. string.rep(struct.pack('<d', now), c)
    else -- drop up to cost of the units recorded at at: one run, found from the newest
      local hi = n
      while hi >= first do
        local x = unit(body, hi)
        if not x then return short_healed(log, op, now, cost, retain, limit, window, v, at) end
        if x <= at then break end
        hi = hi - 1
      end
      local lo = hi
      while lo > hi - cost and lo >= first and unit(body, lo) == at do lo = lo - 1 end
      kept = string.sub(body, first * 8 - 7, lo * 8) .. string.sub(body, hi * 8 + 1, n * 8)
    end
    if #kept == 0 then
      redis.call('DEL', log)
    else
      short_set(log, kept, log_ttl(window, retain))
    end
    local o = decide_short(log, 'peek', now, 1, retain, limit, window, kept) -- writes nothing
    if op == 'charge' then -- allowed: whether it fit, and then no retry_after
      local fit = cost <= limit - count
      o[1] = fit and 1 or 0
      if fit then o[4] = 0 end
    end
    return o
  end

  local check = cost
  if op == 'refund' then -- drop the newest units, then answer as a peek of 1
    keep, count, check = n - cost, count - cost, 1
  end
  local allowed = check <= limit - count
  local retry = 0
  if not allowed then -- the unit holding the k-th oldest leaves when the request fits
    local k = count + check - limit
    retry = window
    if k <= count then
      local at = unit(body, first + k - 1)
      if not at or at <= cutoff then return short_healed(log, op, now, cost, retain, limit, window, v, at) end -- out of order: none of ours
      retry = math.min(at, now) + window - now
    end
  end
  if op == 'take' and allowed then count = count + cost end

  -- the write: a refund, or a take that admits, prunes or re-times (but a
  -- quiet take's denial, which writes nothing)
  if op == 'refund' or (op == 'take' and (allowed or first > 1 or body ~= v or healed) and not (quiet and not allowed)) then
    local kept = string.sub(body, first * 8 - 7, math.min(keep, n) * 8)
    if keep > n then kept = kept .. string.rep(struct.pack('<d', now), keep - n) end
    if #kept == 0 then
      redis.call('DEL', log)
    else
      short_set(log, kept, log_ttl(window, retain))
    end
  end
  if count > 0 and not oldest then oldest = now end -- a take on an empty log
  local reset_at = now
  if count > 0 then reset_at = math.min(oldest, now) + window end
  return {allowed and 1 or 0, count, reset_at, retry, now}
end

-- decide_stored decides on s, the short log at log as stored.
local function decide_stored(log, op, now, cost, retain, limit, window, s, at)
  local v, bad = short_units(s)
  if bad then return short_healed(log, op, now, cost, retain, limit, window, v, at) end
  return decide_short(log, op, now, cost, retain, limit, window, v, nil, at)
end

-- short_denied answers a take or a peek of cost that the short log at log
-- denies, reading no more of it than decide_short would use: the header
-- and the oldest unit (one GETRANGE of 24 bytes), which tell the count,
-- the key's time and the retry of a request that needs the oldest to
-- leave, and the k-th oldest when more must (after a charge past the
-- limit, or a cost that fits a fuller window). A log read whole costs the
-- server its every byte (a GET of 100 units 0.8 µs more than one of 16
-- bytes: docs/figures.md). nil when the answer needs the whole log: the
-- window holds too few units (the request may fit), the oldest has left it
-- (a take prunes), the newest is from the future (a take re-times), or a
-- number read is none of ours; decide_short then decides as ever. Where
-- it answers, decide_short answers the same and writes nothing. The count
-- is the header's, not checked against the string's length: a header that
-- lies plausibly denies as a state that did (a window's count would),
-- until the key's TTL ends, which a denial does not renew.
local function short_denied(log, now, cost, limit, window)
  local h = redis.pcall('GETRANGE', log, '0', '23')
  if type(h) ~= 'string' or #h ~= 24 then return nil end
  local n, newest, oldest = struct.unpack('<d', h), unit(h, 2), unit(h, 3)
  if not (n >= 1 and n <= max_log and n % 1 == 0) or not newest or not oldest or oldest > newest then return nil end
  if newest > now and newest - now <= max_skew then now = newest end -- the key's time
  if newest > now or oldest <= now - window or cost <= limit - n then return nil end
  local k, at = n + cost - limit, oldest -- the k-th oldest unit leaves when the request fits
  if k > 1 then
    local u = redis.call('GETRANGE', log, int_text(8 + 8 * k), int_text(15 + 8 * k))
    at = #u == 8 and unit(u, 1)
    if not at or at < oldest or at > newest then return nil end
  end
  return {0, n, oldest + window, at + window - now, now}
end

-- short_from_log moves the sorted set at log (and its meta) to a short
-- log, keeping the units still in the window, and returns it. A log
-- holding more than short_log units in the window (a limit lowered across
-- short_log) is left as it is, and nil returned: it is decided as a sorted
-- set until enough have left, so that no string longer than a short log's
-- is ever copied a call. Its entries are counted first (O(1)), so a log
-- too long to move costs nothing more; no more entries are read than could
-- be moved.
local function short_from_log(log, meta, now, window, retain)
  if redis.call('ZCARD', log) > short_log and redis.call('ZCOUNT', log, num(now - window + 1), '+inf') > short_log then return nil end
  local e = redis.call('ZREVRANGEBYSCORE', log, '+inf', num(now - window + 1), 'WITHSCORES', 'LIMIT', '0', num(short_log + 1))
  if #e / 2 > short_log then return nil end
  local parts, units = {}, 0
  for i = #e - 1, 1, -2 do -- oldest first
    local s = tonumber(e[i + 1])
    if s and s >= 0 and s <= max_time and s % 1 == 0 then
      local c = cost_of(e[i])
      units = units + c
      if units > short_log then return nil end
      parts[#parts + 1] = string.rep(struct.pack('<d', s), c)
    end
  end
  redis.call('DEL', log, meta)
  local v = table.concat(parts)
  if #v > 0 then short_set(log, v, log_ttl(window, retain)) end
  return v
end

-- log_from_short moves the short log at log to a sorted set and its meta,
-- keeping the units still in the window, one member for the units of one
-- time; whatever else log holds is deleted (no state), as is meta.
local function log_from_short(log, meta, now, window, retain)
  local s = redis.pcall('GET', log)
  redis.call('DEL', log, meta)
  if type(s) ~= 'string' then return end
  local v = short_units(s) -- a header none of ours: every byte, as the units healed
  local n = #v / 8
  if n % 1 ~= 0 or n > max_log then return end
  local times, costs, units, newest = {}, {}, 0, -1
  for i = 1, n do
    local x = unit(v, i)
    if not x then return end -- none of ours: no state
    if x > now - window then
      units, newest = units + 1, math.max(newest, x)
      if x == times[#times] then
        costs[#costs] = costs[#costs] + 1
      else
        times[#times + 1], costs[#costs + 1] = x, 1
      end
    end
  end
  if #times == 0 then return end
  local args = {}
  for i = 1, #times do
    args[#args + 1] = num(times[i])
    args[#args + 1] = costs[i] > 1 and i .. ':' .. costs[i] or tostring(i)
    if #args == 512 or i == #times then
      redis.call('ZADD', log, unpack(args))
      args = {}
    end
  end
  local ttl_ms = log_ttl(window, retain)
  -- n (the members' counter), x, t, o unknown, e unknown, c
  redis.call('SET', meta, struct.pack('<dddddd', #times, units - #times, newest, -1, -1, #times), 'PX', ttl_text(ttl_ms))
  redis.call('PEXPIRE', log, ttl_text(ttl_ms)) -- after: the log is never outlived by its meta's count
end

-- sliding decides a request on a sliding log, in the form its limit picks.
-- A take or a charge moves a key of the other form to this one (see
-- short_from_log for a sorted set too long to move); a peek, a refund or an
-- undo decides on the form the key is in, changing nothing of it (a
-- refused refund writes nothing), so that no entry is dropped by a look. A key of neither form (another
-- type) holds no state: it is deleted, even by a peek, and decided as a
-- fresh key. Any other error is raised as the server gave it (READONLY,
-- OOM: the client acts on the code).
local function sliding(log, meta, op, now, cost, retain, limit, window, own_clock, at)
  if limit > short_log then -- the sorted set's: its TYPE, where a GET of it would be an error
    local v = redis.pcall('GET', meta)
    if op == 'take' then -- a take needs no TYPE: its first command on the log tells it
      local r = take_on_meta(log, meta, v, now, cost, retain, limit, window, own_clock, at)
      if r then return r end
      -- decide_log's take writes nothing before its first command on the
      -- log, which raises WRONGTYPE for a short log (or another type):
      -- caught, and decided again once the log is typed
      local ok
      ok, r = pcall(decide_log, log, meta, op, now, cost, retain, limit, window, own_clock, at, v)
      if ok then return r end
      caught_wrong_type(r)
    end
    local t = redis.call('TYPE', log).ok
    if t == 'string' then
      if op ~= 'take' and op ~= 'charge' then
        return decide_stored(log, op, now, cost, retain, limit, window, redis.call('GET', log), at)
      end
      log_from_short(log, meta, now, window, retain)
      v = nil -- written anew: read again
    elseif t ~= 'zset' and t ~= 'none' then
      redis.call('DEL', log, meta)
      v = false
    end
    return decide_log(log, meta, op, now, cost, retain, limit, window, own_clock, at, v)
  end
  if op == 'take' or op == 'peek' then
    local r = short_denied(log, now, cost, limit, window)
    if r then return r end
  end
  local s = redis.pcall('GET', log) -- the short log as stored, or false for no key
  if wrong_type(s) then
    if redis.call('TYPE', log).ok ~= 'zset' then
      redis.call('DEL', log, meta)
      s = false
    elseif op == 'take' or op == 'charge' then
      local v = short_from_log(log, meta, now, window, retain) -- its units; nil: too long to move
      if v then return decide_short(log, op, now, cost, retain, limit, window, v, nil, at) end
      return decide_log(log, meta, op, now, cost, retain, limit, window, own_clock, at)
    else
      return decide_log(log, meta, op, now, cost, retain, limit, window, own_clock, at) -- the sorted set, as it is
    end
  end
  return decide_stored(log, op, now, cost, retain, limit, window, s, at)
end
