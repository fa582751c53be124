-- The start of every script: the arguments, and the time of the decision.
-- ARGV     limit, window (µs), cost (0 = peek), now (µs, or "" for the
--          server's TIME), TTL slack (ms)
-- Times are integers below 2^53: exact as Lua numbers, and redis.call
-- passes numbers on exactly.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local slack = tonumber(ARGV[5])
local now = tonumber(ARGV[4])
if not now then
  if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
