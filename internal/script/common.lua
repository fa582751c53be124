-- Layout 1 of the keys and their values (keys.go: script.Layout).
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

