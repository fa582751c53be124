-- Several requests in one atomic step (TakeAll): all admitted and
-- recorded, or none recorded; or several peeked (ARGV[2] == 'peek': the
-- first step of TakeApart, apart.go; 'look': PeekAll). A take here is a
-- TakeAll's: a denial writes nothing (quiet) but its penalty box; so does
-- a peek's, which fails its TakeAll; a look's boxes nothing.
-- KEYS  per request, its keys (one; the log and its meta for a sliding log:
--       keys.go), then its penalty box's if it has one; on a cluster, one
--       hash tag for all
-- ARGV  9 per request: algorithm ('sw' | 'fw' | 'swc' | 'gcra'), then
--       one.lua's ARGV, the policy's third number '' but for GCRA, ARGV[8]
--       '', the penalty box's length (µs) or ''
-- Returns 5 integers per request, as one.lua's reply
-- (the algorithms' functions come first: lua.go.)
quiet, pending, news = true, nil, nil -- set by every call: a library keeps them between calls
local server_now -- read once: every request of one step is decided at one time

-- The penalty box of the request decide is at (kblock, block, now0,
-- maxcost: common.lua): its denial until till; reading it; putting the key
-- in it from now0. (The bodies' box.lua does nothing here: kblock is nil
-- while they run.)
local function boxed(till)
  return {0, maxcost, till, till - now0, now0}
end

local function box_check()
  local b = tonumber(redis.pcall('GET', kblock)) -- distrusted, as state
  boxed_until = nil
  if b and b > now0 and b <= max_time and b % 1 == 0 then boxed_until = b end
end

local function box()
  local till = now0 + block
  redis.call('SET', kblock, string.format('%.0f', till), 'PX', math.floor((block + 999) / 1000) + slack)
  return boxed(till)
end
local boxes = {} -- by request (its first argument): its box, if it has one and is not in it

-- decide decides the request whose arguments start at ARGV[a] and whose keys
-- start at KEYS[k], with op, and returns its answer and the index of the
-- next request's first key. A request whose key is in its penalty box is
-- denied so, whatever op.
local function decide(a, k, op)
  local alg, now = ARGV[a], tonumber(ARGV[a + 2])
  local own_clock = not now
  if own_clock then
    if not server_now then
      local t = redis.call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = server_now
  end
  local cost, retain = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local p1, p2, p3 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local nkeys = alg == 'sw' and 2 or 1
  local b = tonumber(ARGV[a + 8])
  local next_k = k + nkeys + (b and 1 or 0)
  kblock, block, op0, now0, maxcost = nil, b, op, now, p1 -- no body boxes: this script does
  if b then
    kblock = KEYS[k + nkeys]
    box_check()
    if boxed_until then return boxed(boxed_until), next_k end
    boxes[a], kblock = {KEYS[k + nkeys], b, now, p1}, nil
  end
  if alg == 'sw' then
    return sliding(KEYS[k], KEYS[k + 1], op, now, cost, retain, p1, p2, own_clock), next_k
  end
  local fn = counter
  if alg == 'fw' then fn = fixed elseif alg == 'gcra' then fn = gcra end
  return fn(KEYS[k], op, now, cost, retain, p1, p2, p3, own_clock), next_k
end

-- box_denied puts the key of the request at ARGV[a], denied as o says, in
-- its penalty box if it has one, and answers so; else o.
local function box_denied(a, o)
  local bx = boxes[a]
  if not bx or o[1] ~= 0 then return o end
  kblock, block, now0, maxcost = bx[1], bx[2], bx[3], bx[4]
  return box()
end

-- One request: decided and, if admitted, recorded at once.
if #ARGV == 9 and ARGV[2] ~= 'look' then return box_denied(1, (decide(1, 1, ARGV[2]))) end

local out, k = {}, 1

-- Several peeked: nothing written but the boxes of the denied ('peek': a
-- TakeAll's first step), or nothing at all ('look': PeekAll).
if ARGV[2] == 'peek' or ARGV[2] == 'look' then
  local boxing = ARGV[2] == 'peek'
  for a = 1, #ARGV, 9 do
    local o
    o, k = decide(a, k, 'peek')
    if boxing then o = box_denied(a, o) end
    for j = 1, 5 do out[#out + 1] = o[j] end
  end
  return out
end

-- A TakeAll: one pass deciding each request as a take whose writes wait in
-- pending (the fixed window, the counter, GCRA: one write each) or, for a
-- sliding log, whose many writes a take interleaves with its reads, as a
-- peek to take again once known. If every one is admitted, the writes are
-- made and the logs taken; otherwise nothing is written, and a request
-- admitted in the pass is answered as a peek (a denial's answer is the same
-- either way, and its key goes in its box). The common admission costs one
-- pass, not a peek and a take.
local every, firsts = true, {}
pending = {}
for a = 1, #ARGV, 9 do
  local o
  firsts[a] = k
  o, k = decide(a, k, ARGV[a] == 'sw' and 'peek' or 'take')
  for j = 1, 5 do out[#out + 1] = o[j] end
  every = every and o[1] == 1
end
local writes = pending
pending = nil
for a = 1, #ARGV, 9 do
  local n, again = 5 * (a - 1) / 9, nil
  if every and ARGV[a] == 'sw' then
    again = decide(a, firsts[a], 'take')
  elseif not every and ARGV[a] ~= 'sw' and out[n + 1] == 1 then
    again = decide(a, firsts[a], 'peek') -- a take's answer: the peek's instead
  elseif not every and out[n + 1] == 0 then
    again = box_denied(a, {0, out[n + 2], out[n + 3], out[n + 4], out[n + 5]})
  end
  if again then
    for j = 1, 5 do out[n + j] = again[j] end
  end
end
if every then
  for _, w in ipairs(writes) do redis.call('SET', w[1], w[2], 'PX', w[3]) end
end
return out
