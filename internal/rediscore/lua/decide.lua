-- Several requests in one atomic step (TakeAll): all admitted and
-- recorded, or none recorded; or several peeked (ARGV[2] == 'peek': the
-- first step of TakeApart, apart.go; 'look': PeekAll); or several charged
-- (ARGV[2] == 'charge': ChargeAll, no atomic step). A take here is a
-- TakeAll's: a denial writes nothing (quiet) but its penalty box; so does
-- a peek's, which fails its TakeAll; a look's boxes nothing.
-- KEYS  per request, its keys (one; the log and its meta for a sliding log:
--       keys.go), then its penalty box's if it has one; on a cluster, one
--       hash tag for all
-- ARGV  5 per request: algorithm ('sw' | 'fw' | 'swc' | 'gcra'), then
--       one.lua's first four (op, now, cost, the rule's numbers); for
--       'charge', then the news of each request (one.lua's ARGV[6])
-- Returns 5 integers per request, as one.lua's reply: the request whose
-- arguments start at ARGV[a] has its answer at out[a] to out[a + 4] (as
-- many answers as arguments a request: lua.ArgsPerRequest)
-- (the algorithms' functions and all.lua's helpers come first: lua.go.)
quiet, pending, news = true, nil, nil -- set by every call: a library keeps them between calls
keys, argv, server_now, boxes = KEYS, ARGV, nil, nil -- all.lua's

-- One request: decided and, if admitted, recorded at once.
if #ARGV == 5 and ARGV[2] ~= 'look' then return box_denied(1, (decide(1, 1, ARGV[2]))) end

local out, k = {}, 1

-- Several charged (ChargeAll; ARGV[2] == 'charge'): each request's Charge
-- in turn, as one.lua and box.lua make one (a key in its box is charged
-- and answers so; a charge that did not fit boxes it), and the news of
-- each change goes out (common.lua: news). ARGV holds the requests' five
-- arguments each, then their news, one each, in their order.
if ARGV[2] == 'charge' then
  local n = #ARGV / 6
  quiet = false
  for i = 1, n do
    local a, o = 5 * i - 4, nil
    o, k = decide(a, k, 'charge')
    o = box_denied(a, o)
    redis.pcall('PUBLISH', 'CHANNEL', ARGV[5 * n + i])
    for j = 1, 5 do out[a - 1 + j] = o[j] end
  end
  return out
end

-- Several peeked: nothing written but the boxes of the denied ('peek': a
-- TakeAll's first step), or nothing at all ('look': PeekAll).
if ARGV[2] == 'peek' or ARGV[2] == 'look' then
  local boxing = ARGV[2] == 'peek'
  for a = 1, #ARGV, 5 do
    local o
    o, k = decide(a, k, 'peek')
    if boxing then o = box_denied(a, o) end
    local n = a - 1
    for j = 1, 5 do out[n + j] = o[j] end
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
for a = 1, #ARGV, 5 do
  local o
  firsts[a] = k
  o, k = decide(a, k, ARGV[a] == 'sw' and 'peek' or 'take')
  local n = a - 1
  for j = 1, 5 do out[n + j] = o[j] end
  every = every and o[1] == 1
end
local writes = pending
pending = nil
for a = 1, #ARGV, 5 do
  local n, again = a - 1, nil
  if every and ARGV[a] == 'sw' then
    again = decide(a, firsts[a], 'take')
  elseif not every and ARGV[a] ~= 'sw' and out[n + 1] == 1 then
    again = decide(a, firsts[a], 'peek') -- a take's answer: the peek's instead
  elseif not every and out[n + 1] == 0 and boxes and boxes[a] then -- a denial in the pass boxes its key
    again = box_denied(a, {0, out[n + 2], out[n + 3], out[n + 4], out[n + 5]})
  end
  if again then
    for j = 1, 5 do out[n + j] = again[j] end
  end
end
if every then
  for _, w in ipairs(writes) do redis.call('SET', w[1], w[2], 'PX', ttl_text(w[3])) end
end
return out
