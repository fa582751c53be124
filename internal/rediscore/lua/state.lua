-- The state of the fixed window, the counter and GCRA: v, the value of
-- their one key ka (false: none), read before the algorithm's body. A key of
-- another type is no state: it is deleted, even by a peek.
local v = redis.pcall('GET', ka)
if type(v) == 'table' and wrong_type(v) then -- a key of another type is no state
  redis.call('DEL', ka)
  v = false
end
