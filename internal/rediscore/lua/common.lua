-- ratelimit scripts, key layout 1 (keys.go: script.Layout).
-- The algorithms, one file each (the rules: package algorithm). Each
-- decides a request of cost at now (µs) under its policy, for op 'take',
-- 'peek', 'refund', 'undo' (a refund of the admission recorded at at) or
-- 'charge' (usage recorded whatever the quota), and answers allowed (1 |
-- 0; 2 for a refused refund), count, reset_at (µs), retry_after (µs) and
-- now. A refund, an undo and a charge answer what a peek of cost 1 says
-- afterwards, a charge's allowed (and no retry_after) when it fit. Writes set a TTL of the state's life or
-- the retention (ms), whichever is longer, plus slack (ms). Every number
-- stays an integer below 2^53: exact as a Lua number, and as the doubles
-- struct.pack writes.
--
-- The fixed window, the counter and GCRA are bodies, not functions: the
-- script of one request runs the body inline (one.lua), so a call creates no
-- closure; the script of several (decide.lua) wraps each in a function once.
-- A body sees ka, kb (its keys), op, now, cost, retain, p1, p2, p3 (the
-- policy), own_clock, quiet and pending, and returns its answer's table.

-- The bounds package backend states (lua.go writes them in for BOUNDS):
-- the latest time (µs), the largest count (a limit's, and what a charge
-- may add), GCRA level (a burst's units, and the debt a charge may add) and
-- unit, and the largest sliding log; the TTL slack (ms); the largest skew
-- (µs); the largest charge, the longest a GCRA debt drains (µs), the
-- largest stored number; how far (ms) the store's estimate of the server's
-- time may be from its clock (lua.EstimateMargin).
local max_time, max_count, max_level, max_unit, max_log, slack, max_skew, max_charge, max_debt, max_stored, estimate_ms = BOUNDS

-- A request's now (µs) is the caller's time; the server's time as the
-- store estimates it when negative (-now: lua.Estimated); or none (the
-- empty string), the script then reading TIME. own_clock is what a body is
-- told of it: false for a caller's time, or how far (ms) now may be from the
-- server's clock: 0 for its TIME, estimate_ms for an estimate. The sliding
-- log dates its keys' expiry by the server's clock, allowing for that
-- (log.lua).
local function clock_of(now)
  if not now then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
  end
  if now < 0 then return -now, estimate_ms end
  return now, false
end

-- A key's time never goes back (package algorithm's rules): a request
-- whose now is behind the time of the key's state (the newest entry of a
-- log, a window's start, a bucket's level) by at most max_skew is decided
-- at that time, so that skewed clocks share one timeline per key. Each
-- algorithm applies it once its state is read, before deciding.

-- Stored numbers are distrusted: a key may have been written by hand, by a
-- bug elsewhere or by a botched migration. A number is valid when it is an
-- integer in its bounds (v >= lo and v <= hi and v % 1 == 0: false for NaN
-- and ±Inf); a state with any other number is no state: the request is
-- decided as on a fresh key, and the write replaces it, so a corrupt key
-- heals on its next write. A key of another type holds no state of ours
-- either (someone wrote another kind of value there): it is deleted, even
-- by a peek. No loop is bounded by a stored number.

-- quiet says a take is a TakeAll's: a denial writes nothing, not even the
-- re-timing of state from the future that a Take's denial writes (see
-- package backend: a TakeAll that does not admit every request records
-- nothing, as a peek). pending, while a TakeAll defers the writes of its
-- takes until every request is known to be admitted (decide.lua), holds
-- them: {key, value, ttl (ms)} each.
local quiet, pending = false, nil

-- rule_arg is the last rule argument read (a request's packed numbers:
-- args.go's packRule) and rule_retain to rule_box its numbers: a script
-- unpacks a rule's argument only when it is not the last one's (equal
-- strings are one object in Lua, compared at no cost), and a rule's
-- requests come one after another (docs/figures.md, "A rule read once").
local rule_arg, rule_retain, rule_p1, rule_p2, rule_p3, rule_box

-- The penalty box (package backend's Rule.Block): kblock, the box's key of
-- the one request a script decides (nil: the rule has none), block its
-- length (µs), boxed_until when the key is in it; op0 and now0 the
-- request's op and time as it came (a body re-times now), maxcost the
-- rule's largest cost (the policy's p1: a limit, or GCRA's burst). A boxed
-- key is denied (a charge, a refund, an undo still do their work, and answer
-- as a peek afterwards would); a take denied or a charge that did not fit
-- puts it there. one.lua reads the box, box.lua answers so after a body;
-- inline, not functions: a call of one request creates no closure.
local kblock, block, boxed_until, op0, now0, maxcost

-- news, for a charge, a refund or an undo of one request, is the message
-- box.lua publishes on the channel of changes once the change is made, so
-- that other instances' near caches forget the key (rediscore's Listener);
-- a refused refund changes nothing and tells nothing. A publication the
-- server refuses (an ACL) fails nothing: the change itself was made.
local news

-- wrong_type says whether reply, a redis.pcall's, is the error of a key of
-- another type (someone wrote another kind of value there: no state of
-- ours); any other error is raised as the server gave it (READONLY, OOM:
-- the client acts on the code).
local function wrong_type(reply)
  if type(reply) ~= 'table' or not reply.err then return false end
  if string.find(reply.err, 'WRONGTYPE', 1, true) ~= 1 then error(reply) end
  return true
end

-- caught_wrong_type says whether e, an error a Lua pcall caught, is a key
-- of another type's; any other is raised again. Redis 7 and Valkey hand a
-- pcall the server's error as its text (older servers as {err = text}): an
-- error of the server's (a code in capitals first: READONLY, OOM) is
-- raised again as the server's, so that the client reads its code; a
-- script's own error as it came.
local function caught_wrong_type(e)
  if type(e) == 'table' and e.err then e = e.err end
  if type(e) == 'string' then
    if string.find(e, 'WRONGTYPE', 1, true) == 1 then return true end
    if string.find(e, '^%u+ ') then error({err = e}) end
  end
  error(e, 0)
end

-- Numbers go to the server in the form it turns into text fastest. Redis
-- before 7.2 formats a Lua number with %.17g, 0.2-0.3 µs of its time a
-- number (glibc's exact printing of a double), where string.format('%d')
-- costs about half; Redis 7.2 and Valkey format it faster than %d would
-- (docs/figures.md: "Numbers as text"). num(x) is x for those, and x's
-- text for the others: for scores, ranks and counts, which the server
-- reads in any exact form. int_text(x) is the text whatever the server:
-- for members and values, which must read the same on every server, and
-- TTLs (Redis 7.2 prints 100000000 as 1e+08, which PX refuses). A TTL
-- repeats (a rule's life and retention), so its text is remembered: at
-- most 256, then they are forgotten together, so that TTLs that move (the
-- counter's) cost only their formatting. Every number sent is an integer
-- below 2^53, which %d prints exactly.
local slow_numbers = (redis.REDIS_VERSION_NUM or 0) < 0x070200
local function int_text(x) return string.format('%d', x) end
local function num(x)
  if slow_numbers then return string.format('%d', x) end
  return x
end

-- now_arg is the argument that gave the request's time now0 (a caller's
-- time, or an estimate's with its sign), nil when the script read TIME:
-- time_text(x) is num(x) for a time x, that argument's digits where x is
-- now0 and the server formats numbers slowly (a copy of the text costs
-- it less than formatting the number: docs/figures.md, "Numbers as text").
local now_arg
local function time_text(x)
  if not slow_numbers or not now_arg or x ~= now0 then return num(x) end
  if string.byte(now_arg, 1) == 45 then return string.sub(now_arg, 2) end -- '-': an estimate
  return now_arg
end
-- packed is the answer of a call of one request: r's five numbers, as
-- little-endian doubles in one string (exact: every one is an integer
-- below 2^53). A table costs the server more to answer with: before its
-- items it looks it up for the fields of an error, of a status and of
-- RESP3's types (docs/figures.md, "The server's clock and the answer").
local function packed(r) return struct.pack('<ddddd', r[1], r[2], r[3], r[4], r[5]) end

local ttl_texts, ttl_count = {}, 0
local function ttl_text(ms)
  local s = ttl_texts[ms]
  if s then return s end
  s = string.format('%d', ms)
  if ttl_count >= 256 then ttl_texts, ttl_count = {}, 0 end
  ttl_texts[ms], ttl_count = s, ttl_count + 1
  return s
end
