-- One atomic step deciding one request, or several together (all admitted
-- and recorded, or none recorded).
-- KEYS  per request, its keys: the log and its counter for 'sw', the hash
--       for 'fw' (see keys.go; one hash tag for all on a cluster)
-- ARGV  slack (ms), then 6 per request: algorithm ('sw' | 'fw'), limit,
--       window (µs), cost, record ('1' take | '0' peek), now (µs, or '' for
--       the server's TIME)
-- Returns 5 integers per request: allowed (0|1), count, reset_at (µs),
--       retry_after (µs), now (µs)
-- (algorithms.lua comes first.)
local slack = tonumber(ARGV[1])
local requests = (#ARGV - 1) / 6

local server_now -- read once: every request of one step is decided at one time
local function clock(arg)
  local t = tonumber(arg)
  if t then return t end
  if not server_now then
    if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
    local tm = redis.call('TIME')
    server_now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  end
  return server_now
end

-- decide decides request i (from 0) whose keys start at KEYS[k], recording
-- it when record is true; it appends the reply to out and returns whether it
-- was admitted and the index of the next request's keys.
local function decide(i, k, record, out)
  local a = 2 + 6 * i
  local limit, window, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local now = clock(ARGV[a + 5])
  local allowed, count, reset_at, retry
  if ARGV[a] == 'fw' then
    allowed, count, reset_at, retry = fixed(KEYS[k], now, limit, window, cost, record, slack)
    k = k + 1
  else
    allowed, count, reset_at, retry = sliding(KEYS[k], KEYS[k + 1], now, limit, window, cost, record, slack)
    k = k + 2
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed and 1 or 0, count, reset_at, retry, now
  return allowed, k
end

local out = {}
if requests == 1 then
  decide(0, 1, ARGV[6] == '1', out)
  return out
end
-- Several: peek at all; record all only if all would be admitted.
local k, all = 1, true
for i = 0, requests - 1 do
  local allowed
  allowed, k = decide(i, k, false, out)
  all = all and allowed
end
if all then
  out, k = {}, 1
  for i = 0, requests - 1 do
    local _
    _, k = decide(i, k, true, out)
  end
end
return out
