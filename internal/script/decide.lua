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

local server_now -- read once: every request of one step is decided at one time

-- decide decides the request whose arguments start at ARGV[a] and whose keys
-- start at KEYS[k], recording it when record is true. It returns allowed,
-- count, reset_at, retry_after, now and the index of the next request's keys.
local function decide(a, k, record)
  local limit, window, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local now = tonumber(ARGV[a + 5])
  if not now then
    if not server_now then
      if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
      local t = redis.call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = server_now
  end
  if ARGV[a] == 'fw' then
    local allowed, count, reset_at, retry = fixed(KEYS[k], now, limit, window, cost, record, slack)
    return allowed, count, reset_at, retry, now, k + 1
  end
  local allowed, count, reset_at, retry = sliding(KEYS[k], KEYS[k + 1], now, limit, window, cost, record, slack)
  return allowed, count, reset_at, retry, now, k + 2
end

if #ARGV == 7 then -- one request: the common case
  local allowed, count, reset_at, retry, now = decide(2, 1, ARGV[6] == '1')
  return {allowed and 1 or 0, count, reset_at, retry, now}
end

-- Several: peek at all; record all only if all would be admitted.
local function all(record)
  local out, k, every = {}, 1, true
  for a = 2, #ARGV, 6 do
    local allowed, count, reset_at, retry, now
    allowed, count, reset_at, retry, now, k = decide(a, k, record)
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed and 1 or 0, count, reset_at, retry, now
    every = every and allowed
  end
  return out, every
end
local out, every = all(false)
if every then out = all(true) end
return out
