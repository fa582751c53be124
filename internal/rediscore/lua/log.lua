-- The sliding-window log of a limit over short_log (short.lua: the choice
-- of form), its parts: the keys' TTL, the entries of its sorted set and
-- its meta, which sliding.lua's functions decide on.
-- log   a sorted set of entries scored by their time; a member is "id" for
--       a request of cost 1, "id:cost" otherwise
-- meta  a string, the doubles n (the counter that names entries), x (the
--       sum of cost-1 over the entries), t (the newest entry's time), o, e
--       and c (see decide_log); -1 for t, o, e and c: unknown
-- log_ttl is the TTL (ms) of a log's keys after a write: its window or the
-- retention, whichever is longer, plus slack (either form).
local function log_ttl(window, retain)
  local w = window + 999
  w = (w - w % 1000) / 1000
  if w < retain then w = retain end
  return w + slack
end

-- expiry is the meta's e for keys given ttl_ms (ms) at now_ms on the clock
-- own_clock (common.lua's clock_of): a time the keys outlive on the
-- server's clock, an estimate's error taken off; -1 (unknown) on a
-- caller's clock.
local function expiry(now_ms, ttl_ms, own_clock)
  if not own_clock then return -1 end
  return now_ms + ttl_ms - own_clock
end

-- lives says whether keys that expire at expires (the meta's e: -1 for
-- unknown) outlive ttl_ms - slack from now_ms (ms) on the clock own_clock,
-- so need no renewal: on the server's clock only, the estimate's error
-- allowed for; and never for an e later than a write at now_ms would set
-- (a clock that went back: renewed).
local function lives(expires, now_ms, ttl_ms, own_clock)
  if not own_clock or expires < 0 then return false end
  local left = expires - now_ms
  return left - own_clock >= ttl_ms - slack and left <= ttl_ms + own_clock
end

local function cost_of(member)
  local i = string.find(member, ':', 1, true)
  if i then
    local c = tonumber(string.sub(member, i + 1))
    if c and c >= 1 and c <= max_log + 1 and c % 1 == 0 then return c end -- a charge's: the limit + 1
  end
  return 1 -- a member of ours, or one written by hand: one unit
end

-- stale_extra is the part of extra held by the entries of log at or before
-- cutoff (0 when extra is: every entry is one unit).
local function stale_extra(log, cutoff, extra)
  local x = 0
  if extra > 0 then
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', num(cutoff))) do
      x = x + cost_of(member) - 1
    end
  end
  return x
end

-- add_entry adds an entry of cost at score under a member unique among the
-- entries of log: members are small integers, compact in a listpack (below
-- 10^8, so that every server prints one as the same digits: num); the
-- counter n proposes the next id in [1, span], and ZADD NX moves on past a
-- member still in use. The caller passes held >= the entries of log, so
-- span > held and a free id is found within span tries: the loop is bounded
-- whatever the stored data. It returns the new n and the entry's member;
-- nil and the error when log is of another type (a take's first command
-- on the log may be this one: sliding types the log then).
local function add_entry(log, score, cost, held, n)
  local span, at = math.max(4096, 2 * held), time_text(score)
  for _ = 1, span do
    n = n % span + 1
    local member = num(n)
    if cost > 1 then member = member .. ':' .. cost end
    local added = redis.pcall('ZADD', log, 'NX', at, member)
    if type(added) == 'table' and wrong_type(added) then return nil, added end
    if added == 1 then return n, member end
  end
  error('ratelimit: no free member in the log ' .. log .. ': its state is corrupt')
end

-- prune drops the entries of log at or before cutoff, and returns extra
-- without their part and the number of entries dropped (the caller writes
-- meta).
local function prune(log, cutoff, extra)
  local pruned = stale_extra(log, cutoff, extra)
  local removed = redis.call('ZREMRANGEBYSCORE', log, '-inf', num(cutoff))
  return math.max(extra - pruned, 0), removed -- never below 0, whatever the members say
end

-- rebuild is what the meta of log says, read from log itself: the extra
-- units, the newest and oldest entries' times (-1: none) and the number of
-- entries; nil for a log of more entries than any limit's (none of ours).
-- It reads at most max_log + 2 entries (a charge leaves a log of the
-- largest limit max_log + 1 units): a meta that is missing (a fresh
-- key, or one evicted apart from its log) or none of ours is rebuilt so,
-- as is one that disagrees with its log (decide_log).
local function rebuild(log)
  local e = redis.call('ZRANGE', log, '0', num(max_log + 1), 'WITHSCORES')
  local n = #e / 2
  if n > max_log + 1 then return nil end
  if n == 0 then return 0, -1, -1, 0 end
  local extra = 0
  for i = 1, #e, 2 do extra = extra + cost_of(e[i]) - 1 end
  return extra, tonumber(e[#e]), tonumber(e[2]), n
end

-- unit_at is the time of the entry holding the k-th oldest unit of the
-- log's window (cutoff, +inf), which holds count units, counted from
-- whichever end is nearer: a denial reads at most about half the limit's
-- entries, however long the log (a limit lowered under it). nil when the
-- log ends first (its meta miscounted).
local function unit_at(log, cutoff, k, count)
  local offset, left = 0, count - k + 1 -- from the newest, the k-th oldest is the left-th
  while true do
    local e
    if k <= left then
      e = redis.call('ZRANGEBYSCORE', log, num(cutoff + 1), '+inf', 'WITHSCORES', 'LIMIT', num(offset), '128')
    else
      e = redis.call('ZREVRANGEBYSCORE', log, '+inf', num(cutoff + 1), 'WITHSCORES', 'LIMIT', num(offset), '128')
    end
    if #e == 0 then return nil end
    for i = 1, #e, 2 do
      if k <= left then k = k - cost_of(e[i]) else left = left - cost_of(e[i]) end
      if k <= 0 or left <= 0 then return tonumber(e[i + 1]) end
    end
    offset = offset + 128
  end
end

-- read_meta is what the meta v (GET's answer: false for none) holds: n,
-- x, t, o, e and c (see decide_log), or nil for no meta or one that is
-- none of ours (a number out of its bounds, another length or type).
-- It keeps what it read last (a string's content is its value, and
-- equal strings are one object in Lua: comparing them costs nothing), so
-- that a meta parsed once is not parsed again by the next step of a call.
local last_v, last_seq, last_extra, last_newest, last_oldest, last_expires, last_entries
local function read_meta(v)
  if v == last_v then return last_seq, last_extra, last_newest, last_oldest, last_expires, last_entries end
  if type(v) ~= 'string' or #v ~= 48 then wrong_type(v) return nil end -- a meta of another type is none of ours
  local seq, extra, newest, oldest, expires, entries = struct.unpack('<dddddd', v)
  if not (seq >= 0 and seq <= 2 ^ 53 and seq % 1 == 0 and extra >= 0 and extra <= max_log and extra % 1 == 0
      and newest >= -1 and newest <= max_time and newest % 1 == 0 and oldest >= -1 and oldest <= max_time and oldest % 1 == 0
      and expires >= -1 and expires <= max_time and expires % 1 == 0 and entries >= -1 and entries <= max_log + 1 and entries % 1 == 0) then
    seq, extra, newest, oldest, expires, entries = nil, nil, nil, nil, nil, nil
  end
  last_v, last_seq, last_extra, last_newest, last_oldest, last_expires, last_entries = v, seq, extra, newest, oldest, expires, entries
  return seq, extra, newest, oldest, expires, entries
end
