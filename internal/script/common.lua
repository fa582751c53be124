-- Layout 2 of the keys and their values (keys.go: script.Layout); reads 1 too.
-- The algorithms, one function each (the rules: package algorithm). Each
-- decides a request of cost at now (µs) under its policy, for op 'take',
-- 'peek' or 'refund', and returns allowed (1 | 0; 2 for a refused refund),
-- count, reset_at (µs) and retry_after (µs). A refund returns what a peek of
-- cost 1 says afterwards. Writes set a TTL of the state's life or the
-- retention (ms), whichever is longer, plus slack (ms). Every number stays
-- an integer below 2^53: exact as a Lua number, and as the doubles
-- struct.pack writes; numbers written into text are formatted with %.0f,
-- exact too.

-- The bounds package backend states (script.go writes them in for BOUNDS):
-- the latest time (µs), the largest count, GCRA level and unit, and the
-- largest sliding log.
local max_time, max_count, max_level, max_unit, max_log = BOUNDS

-- Stored numbers are distrusted: a key may have been written by hand, by a
-- bug elsewhere or by a botched migration. valid says whether v is an
-- integer in [lo, hi] (false for nil, NaN and ±Inf); a state with any other
-- number is no state: the request is decided as on a fresh key, and the
-- write replaces it, so a corrupt key heals on its next write. No loop is
-- bounded by a stored number.
local function valid(v, lo, hi) return v ~= nil and v >= lo and v <= hi and v % 1 == 0 end

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

-- The state of the fixed window, the counter and GCRA has a key in each
-- layout: k2, packed doubles (struct format fmt); k1, layout 1's (read1 and
-- write1 read and write it). A script writes the layout it is told (l2:
-- layout 2), reads that key first and the other one when it is missing.
-- State read from the other key moves on write (that key is deleted), so a
-- key's state lives under one name, whichever layout each instance writes.

-- load returns whether the state came from the other layout's key, then its
-- numbers (none: no state). A packed value of the wrong length is no state.
local function load(k2, k1, l2, fmt, read1)
  if l2 then
    local v = redis.call('GET', k2)
    if v then
      if #v ~= 8 * (#fmt - 1) then return false end
      return false, struct.unpack(fmt, v)
    end
    local a, b, c, d = read1(k1)
    return a ~= nil, a, b, c, d
  end
  local a, b, c, d = read1(k1)
  if a then return false, a, b, c, d end
  local v = redis.call('GET', k2)
  if v and #v == 8 * (#fmt - 1) then return true, struct.unpack(fmt, v) end
  return false
end

-- quiet says a take is a TakeAll's: a denial writes nothing, not even the
-- re-timing of state from the future that a Take's denial writes (see
-- package backend: a TakeAll that does not admit every request records
-- nothing, as a peek).
local quiet = false

-- pending, while a TakeAll defers the writes of its takes until every
-- request is known to be admitted (decide.lua), holds them: save's
-- arguments, with n their number.
local pending

-- save writes the state's numbers (...) with a TTL of ms, in the layout l2
-- says, and deletes the other key if the state came from it (moved); while
-- writes are deferred, it keeps them in pending.
local function save(k2, k1, l2, moved, ms, fmt, write1, ...)
  if pending then
    local w = {k2, k1, l2, moved, ms, fmt, write1, ...}
    w.n = 7 + select('#', ...)
    pending[#pending + 1] = w
    return
  end
  if l2 then
    redis.call('SET', k2, struct.pack(fmt, ...), 'PX', ms)
  else
    write1(k1, ms, ...)
  end
  if moved then redis.call('DEL', l2 and k1 or k2) end
end

-- run decides a request with fn (an algorithm's function) on its keys ka
-- and kb. A key of the wrong type holds no state of ours (someone wrote
-- another kind of value there): both are deleted, even by a peek, and the
-- request is decided as on a fresh key. Any other error is raised as the
-- server gave it (READONLY, OOM: the client acts on the code).
local function run(fn, ka, kb, ...)
  local ok, allowed, count, reset_at, retry = pcall(fn, ka, kb, ...)
  if ok then return allowed, count, reset_at, retry end
  local msg = type(allowed) == 'table' and allowed.err or tostring(allowed)
  if string.find(msg, 'WRONGTYPE', 1, true) ~= 1 then error(redis.error_reply(msg)) end
  redis.call('DEL', ka, kb)
  return fn(ka, kb, ...)
end
