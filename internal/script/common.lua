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
-- numbers (none: no state).
local function load(k2, k1, l2, fmt, read1)
  if l2 then
    local v = redis.call('GET', k2)
    if v then return false, struct.unpack(fmt, v) end
    local a, b, c, d = read1(k1)
    return a ~= nil, a, b, c, d
  end
  local a, b, c, d = read1(k1)
  if a then return false, a, b, c, d end
  local v = redis.call('GET', k2)
  if v then return true, struct.unpack(fmt, v) end
  return false
end

-- save writes the state's numbers (...) with a TTL of ms, in the layout l2
-- says, and deletes the other key if the state came from it (moved).
local function save(k2, k1, l2, moved, ms, fmt, write1, ...)
  if l2 then
    redis.call('SET', k2, struct.pack(fmt, ...), 'PX', ms)
  else
    write1(k1, ms, ...)
  end
  if moved then redis.call('DEL', l2 and k1 or k2) end
end
