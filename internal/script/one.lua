-- One request under one algorithm: the script of Take, Peek and Refund.
-- It holds that algorithm's file only (after common.lua), so the server
-- compiles and runs a fraction of decide.lua's text on every call.
-- KEYS, ARGV and the reply: as decide.lua's for one request (ARGV[3] names
-- the algorithm the script was built with, whose function script.go names
-- fn before this file).
local op, now = ARGV[4], tonumber(ARGV[5])
local cost, retain, slack = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[1])
local own_clock = not now
if own_clock then
  if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local allowed, count, reset_at, retry = run(fn, KEYS[1], KEYS[2], ARGV[2] == '2', now, tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), cost, op, retain, slack, own_clock)
return {allowed, count, reset_at, retry, now}
