-- The helpers of decide.lua (several requests in one step), made once: a
-- library's top runs at load, so a call creates none of them (All's script
-- runs this text on every call, as every other).
-- One call's own, set first by every call (decide.lua): its KEYS and
-- ARGV; the server's time, read once (every request of one step is decided
-- at one time); the boxes of its requests, by request (its first argument):
-- its box, if it has one and is not in it (nil: none has).
local keys, argv, server_now, boxes
-- now_text is the last time argument decide read, now_number its number:
-- a TakeAll's requests on the store's clock share one (the estimate, sent
-- once), read once a call (docs/figures.md, "A rule read once").
local now_text, now_number

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
  redis.call('SET', kblock, int_text(till), 'PX', ttl_text(math.floor((block + 999) / 1000) + slack))
  return boxed(till)
end

-- decide decides the request whose arguments start at argv[a] and whose keys
-- start at keys[k], with op, and returns its answer and the index of the
-- next request's first key. A request whose key is in its penalty box is
-- denied so, whatever op but a charge, which does its work first (then
-- box_denied answers so).
local function decide(a, k, op)
  local alg, now, cost = argv[a], argv[a + 2], argv[a + 3]
  if now ~= now_text then now_text, now_number = now, tonumber(now) end
  now = now_number
  cost = cost == '1' and 1 or tonumber(cost)
  local own_clock
  if not now and server_now then
    now, own_clock = server_now, 0
  else
    now, own_clock = clock_of(now)
    if own_clock == 0 then server_now = now end
  end
  local rule = argv[a + 4]
  if rule ~= rule_arg then rule_arg, rule_retain, rule_p1, rule_p2, rule_p3, rule_box = rule, struct.unpack('<ddddd', rule) end
  local retain, p1, p2, p3, b = rule_retain, rule_p1, rule_p2, rule_p3, rule_box
  local nkeys = alg == 'sw' and 2 or 1
  if b == 0 then b = nil end
  local next_k = k + nkeys + (b and 1 or 0)
  kblock, block, op0, now0, maxcost = nil, b, op, now, p1 -- no body boxes: this script does
  now_arg = own_clock ~= 0 and argv[a + 2] or nil
  if b then
    kblock = keys[k + nkeys]
    box_check()
    if boxed_until and op ~= 'charge' then return boxed(boxed_until), next_k end
    boxes = boxes or {}
    boxes[a], kblock = {keys[k + nkeys], b, now, p1, boxed_until}, nil
  end
  if alg == 'sw' then
    return sliding(keys[k], keys[k + 1], op, now, cost, retain, p1, p2, own_clock), next_k
  end
  local fn = counter
  if alg == 'fw' then fn = fixed elseif alg == 'gcra' then fn = gcra end
  return fn(keys[k], op, now, cost, retain, p1, p2, p3, own_clock), next_k
end

-- box_denied puts the key of the request at argv[a], denied as o says, in
-- its penalty box if it has one, and answers so; else o. A charged key
-- already in its box (decide went on) answers so.
local function box_denied(a, o)
  local bx = boxes and boxes[a]
  if not bx then return o end
  kblock, block, now0, maxcost = bx[1], bx[2], bx[3], bx[4]
  if bx[5] then return boxed(bx[5]) end
  if o[1] ~= 0 then return o end
  return box()
end

