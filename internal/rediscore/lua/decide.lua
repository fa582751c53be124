-- Several requests in one atomic step (TakeAll): all admitted and
-- recorded, or none recorded; or several peeked (ARGV[1] == 'peek': the
-- first step of TakeApart, apart.go). A take here is a TakeAll's: a denial
-- writes nothing (quiet).
-- KEYS  per request, its keys (one; the log and its meta for a sliding log:
--       keys.go; on a cluster, one hash tag for all)
-- ARGV  8 per request: algorithm ('sw' | 'fw' | 'swc' | 'gcra'), then
--       one.lua's ARGV, the policy's third number '' but for GCRA
-- Returns 5 integers per request, as one.lua's reply
-- (the algorithms' functions come first: lua.go.)
quiet = true
local server_now -- read once: every request of one step is decided at one time

-- decide decides the request whose arguments start at ARGV[a] and whose keys
-- start at KEYS[k], with op, and returns its answer and the index of the
-- next request's first key.
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
  if alg == 'sw' then
    return sliding(KEYS[k], KEYS[k + 1], op, now, cost, retain, p1, p2, own_clock), k + 2
  end
  local fn = counter
  if alg == 'fw' then fn = fixed elseif alg == 'gcra' then fn = gcra end
  return fn(KEYS[k], op, now, cost, retain, p1, p2, p3, own_clock), k + 1
end

-- One request: decided and, if admitted, recorded at once.
if #ARGV == 8 then return (decide(1, 1, ARGV[2])) end

local out, k = {}, 1

-- Several peeked: nothing written.
if ARGV[2] == 'peek' then
  for a = 1, #ARGV, 8 do
    local o
    o, k = decide(a, k, 'peek')
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
-- either way). The common admission costs one pass, not a peek and a take.
local every, firsts = true, {}
pending = {}
for a = 1, #ARGV, 8 do
  local o
  firsts[a] = k
  o, k = decide(a, k, ARGV[a] == 'sw' and 'peek' or 'take')
  for j = 1, 5 do out[#out + 1] = o[j] end
  every = every and o[1] == 1
end
local writes = pending
pending = nil
for a = 1, #ARGV, 8 do
  local n, again = 5 * (a - 1) / 8, nil
  if every and ARGV[a] == 'sw' then
    again = decide(a, firsts[a], 'take')
  elseif not every and ARGV[a] ~= 'sw' and out[n + 1] == 1 then
    again = decide(a, firsts[a], 'peek') -- a take's answer: the peek's instead
  end
  if again then
    for j = 1, 5 do out[n + j] = again[j] end
  end
end
if every then
  for _, w in ipairs(writes) do redis.call('SET', w[1], w[2], 'PX', w[3]) end
end
return out
