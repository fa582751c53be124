-- One request: the script of Take, Peek and Refund under one algorithm,
-- whose file follows this one (lua.go), so that the server runs no more
-- text than that algorithm's per call.
-- KEYS  the state's key (the log and its meta for a sliding log: keys.go)
-- ARGV  op ('take' | 'peek' | 'refund' | 'undo' | 'charge' | 'quiet': a
--       take whose denial writes nothing, TakeAll's of one request), now
--       (µs; -now for the store's estimate of the server's time, '' for
--       its TIME: common.lua's clock_of), cost, then the rule's numbers in
--       one argument of little-endian doubles (args.go's packRule): the
--       retention (ms), the policy (limit, window (µs) and 0, or for GCRA
--       burst, unit and drain: algorithm.Rate), the penalty box's length
--       (µs; 0: none); for 'undo', ARGV[5] is the time (µs) of the
--       admission it gives back (for a permit, its id); for 'charge',
--       'refund' and 'undo', ARGV[6] the news to publish
-- Returns allowed (0 | 1; 2 for a refused refund), count, reset_at (µs),
--       retry_after (µs), now (µs): a table, which the call answers packed
--       (common.lua's packed: this text is decide_one's body, lua.go)
local ka, kb, op, now, cost, rule = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
cost = cost == '1' and 1 or tonumber(cost)
if rule ~= rule_arg then rule_arg, rule_retain, rule_p1, rule_p2, rule_p3, rule_box = rule, struct.unpack('<ddddd', rule) end
local retain, p1, p2, p3, box_len = rule_retain, rule_p1, rule_p2, rule_p3, rule_box
local at = tonumber(ARGV[5])
quiet, pending = op == 'quiet', nil -- set by every call: a library keeps them between calls
if quiet then op = 'take' end
local own_clock
now, own_clock = clock_of(now)
block, news = box_len > 0 and box_len or nil, ARGV[6]
kblock = block and KEYS[#KEYS] or nil -- a penalty box: its key is the last
op0, now0, maxcost, boxed_until = op, now, p1, nil
now_arg = own_clock ~= 0 and ARGV[2] or nil
if kblock then
  local b = tonumber(redis.pcall('GET', kblock)) -- distrusted, as state
  if b and b > now0 and b <= max_time and b % 1 == 0 then
    boxed_until = b
    if op == 'take' or op == 'peek' then return {0, maxcost, b, b - now0, now0} end -- the others do their work: box.lua
  end
end
