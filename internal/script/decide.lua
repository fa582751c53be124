-- One atomic step deciding one request, or several together (all admitted
-- and recorded, or none recorded): a TakeAll, whose denials record
-- nothing (as peeks).
-- KEYS  per request, two keys: the log and its meta hash for 'sw', the
--       state's key in layout 2 then in layout 1 for the others (see
--       keys.go; one hash tag for all on a cluster)
-- ARGV  slack (ms), the layout to write ('1' | '2'), then 8 per request:
--       algorithm ('sw' | 'fw' | 'swc' | 'gcra'), op ('take' | 'peek' |
--       'refund'), now (µs, or '' for the server's TIME), cost, retention
--       (ms), then the policy: limit and window (µs), or for 'gcra' burst,
--       unit and drain (algorithm.Rate)
-- Returns 5 integers per request: allowed (0 | 1; 2 for a refused refund),
--       count, reset_at (µs), retry_after (µs), now (µs)
-- (algorithms.lua comes first.)
local slack, l2 = tonumber(ARGV[1]), ARGV[2] == '2'

local server_now -- read once: every request of one step is decided at one time

-- decide decides the request whose arguments start at ARGV[a] and whose keys
-- are KEYS[k] and KEYS[k + 1], with op. It returns allowed, count, reset_at,
-- retry_after and now.
local function decide(a, k, op)
  local alg, now, cost, retain = ARGV[a], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local p1, p2, p3 = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local own_clock = not now
  if own_clock then
    if not server_now then
      if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
      local t = redis.call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = server_now
  end
  local fn = counter
  if alg == 'sw' then fn = sliding elseif alg == 'fw' then fn = fixed elseif alg == 'gcra' then fn = gcra end
  local allowed, count, reset_at, retry = run(fn, KEYS[k], KEYS[k + 1], l2, now, p1, p2, p3, cost, op, retain, slack, own_clock)
  return allowed, count, reset_at, retry, now
end

-- A take here is a TakeAll's: a denial writes nothing (quiet).
quiet = true
if #ARGV == 10 then -- one request: decided and, if admitted, recorded at once
  local allowed, count, reset_at, retry, now = decide(3, 1, ARGV[4])
  return {allowed, count, reset_at, retry, now}
end

-- Several peeked (the first step of TakeApart, apart.go): nothing written.
if ARGV[4] == 'peek' then
  local out, k = {}, 1
  for a = 3, #ARGV, 8 do
    local allowed, count, reset_at, retry, now = decide(a, k, 'peek')
    k = k + 2
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed, count, reset_at, retry, now
  end
  return out
end

-- Several (TakeAll): one pass deciding each request as a take whose writes
-- wait in pending (the fixed window, the counter, GCRA: one save each) or,
-- for a sliding log, whose many writes a take interleaves with its reads,
-- as a peek to take again once known. If every one is admitted, the writes
-- are made and the logs taken; otherwise nothing is written, and a request
-- admitted in the pass is answered as a peek (a denial's answer is the
-- same either way). The common admission costs one pass, not a peek and a
-- take.
local out, every, retake = {}, true, {}
pending = {}
local k = 1
for a = 3, #ARGV, 8 do
  local op = 'take'
  if ARGV[a] == 'sw' then
    op = 'peek'
    retake[#retake + 1] = a
  end
  local allowed, count, reset_at, retry, now = decide(a, k, op)
  k = k + 2
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed, count, reset_at, retry, now
  every = every and allowed == 1
end
local writes = pending
pending = nil
if every then
  for _, w in ipairs(writes) do save(unpack(w, 1, w.n)) end
  for _, a in ipairs(retake) do
    local i = (a - 3) / 8 -- the request's index, from 0
    local n = 5 * i
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = decide(a, 2 * i + 1, 'take')
  end
  return out
end
for a = 3, #ARGV, 8 do
  local i = (a - 3) / 8
  local n = 5 * i
  if ARGV[a] ~= 'sw' and out[n + 1] == 1 then -- a take's answer: the peek's instead
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = decide(a, 2 * i + 1, 'peek')
  end
end
return out
