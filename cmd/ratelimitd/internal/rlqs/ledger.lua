-- The shares of one bucket on a Redis or Valkey server, for every
-- ratelimitd instance that serves its planes: Allocator's rules (see
-- allocator.go) in one atomic call, on the server's clock.
-- KEYS[1] the bucket's hash: a field per plane, "demand seen reports n
--         until at ..." (integers; seen and until in ms of the server's
--         TIME; reports its reports so far; each triple one grant sent: n
--         held until until, sent after its at-th report)
--         and the field '~w': the window (ms) the numbers count in
-- ARGV    plane, demand (requests a window), limit, ttl (ms), op ('grant':
--         report and get a grant; 'forget': the plane's stream ended),
--         window (ms), the most planes the bucket counts (ledger.go's
--         MaxPlanes: a plane it does not know past them gets 0, unrecorded)
-- Returns the plane's grant ('grant'), or 0.
local key, me, demand, limit, ttl, op, window, max_planes = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Every plane's state, its expired grants dropped; a field that is none
-- of ours is dropped too.
local planes, ids, changed = {}, {}, {}
local raw = redis.call('HGETALL', key)
-- A rule reloaded with another window: the numbers are rescaled to it,
-- rounded up, so that the holds keep their rates (Allocator.Rescale).
local scale = 1
for i = 1, #raw, 2 do
  if raw[i] == '~w' and tonumber(raw[i + 1]) and tonumber(raw[i + 1]) > 0 then scale = window / tonumber(raw[i + 1]) end
end
local function rescaled(n) return math.ceil(n * scale) end
-- parse reads a plane's field into its state, or nil for none of ours.
local function parse(text)
  local nums = {}
  for w in string.gmatch(text, '%S+') do nums[#nums + 1] = tonumber(w) end
  if not (nums[1] and nums[2] and nums[3]) or #nums % 3 ~= 0 then return nil end
  local q = {demand = rescaled(nums[1]), seen = nums[2], reports = nums[3], grants = {}}
  for j = 4, #nums, 3 do
    if not (nums[j] and nums[j + 1] and nums[j + 2]) then return nil end
    if nums[j + 1] > now then q.grants[#q.grants + 1] = {rescaled(nums[j]), nums[j + 1], nums[j + 2]} end
  end
  return q, scale ~= 1 or #q.grants * 3 + 3 ~= #nums
end
for i = 1, #raw, 2 do
  if raw[i] ~= '~w' then -- the window: rewritten below
    local q, stale = parse(raw[i + 1])
    planes[raw[i]] = q
    if stale or not q then changed[raw[i]] = true end -- rewritten, or dropped
  end
end
local p = planes[me]
if not p then
  local known = 0
  for _ in pairs(planes) do known = known + 1 end
  if known >= max_planes or op ~= 'grant' then return 0 end -- nothing written: what it read stands
  p = {demand = 0, seen = 0, reports = 0, grants = {}}
  planes[me] = p
end
if op == 'forget' then
  p.seen = 0
else -- a report: a demand below 0 is not known (the last one stands)
  if demand >= 0 then p.demand = demand end
  p.seen, p.reports = now, p.reports + 1
  -- A grant sent two reports ago or more has reached the plane
  -- (Allocator.Report): every older one is replaced there.
  for j = #p.grants, 2, -1 do
    if p.reports >= p.grants[j][3] + 2 then
      local kept = {}
      for k = j, #p.grants do kept[#kept + 1] = p.grants[k] end
      p.grants = kept
      break
    end
  end
end
changed[me] = true

local function hold(q)
  local h = 0
  for _, g in ipairs(q.grants) do h = math.max(h, g[1]) end
  return h
end

-- The live planes (reported within two TTLs), by id; the others go once
-- their holds end.
local held = 0
for id, q in pairs(planes) do
  if now - q.seen < 2 * ttl then
    ids[#ids + 1] = id
  elseif #q.grants == 0 then
    planes[id], changed[id] = nil, true
  end
  if planes[id] then held = held + hold(q) end
end
table.sort(ids)

-- FairShares (fair.go): smallest demand first, each min(its demand, an
-- equal part of what is left); what is left spread equally, the remainder
-- a unit each to the first.
local grant = 0
if op == 'grant' and now - p.seen < 2 * ttl then
  local order = {}
  for i = 1, #ids do order[i] = i end
  table.sort(order, function(a, b)
    local da, db = planes[ids[a]].demand, planes[ids[b]].demand
    if da ~= db then return da < db end
    return a < b
  end)
  local n, left, shares = #ids, limit, {}
  for k, i in ipairs(order) do
    local part = math.floor(left / (n - k + 1))
    part = math.min(part, math.max(planes[ids[i]].demand, 0))
    shares[i], left = part, left - part
  end
  local each, rest = math.floor(left / n), left % n
  local fair
  for i = 1, n do
    local s = shares[i] + each
    if i <= rest then s = s + 1 end
    if ids[i] == me then fair = s end
  end
  local h = hold(p)
  if fair <= h then
    grant = fair
  else
    grant = math.min(fair, h + math.max(limit - held, 0))
  end
  p.grants[#p.grants + 1] = {grant, now + ttl + math.floor(ttl / 2), p.reports} -- allocator.go: half a TTL of slack
end

for id in pairs(changed) do
  local q = planes[id]
  if q then
    local words = {string.format('%d %d %d', q.demand, q.seen, q.reports)}
    for _, g in ipairs(q.grants) do words[#words + 1] = string.format('%d %d %d', g[1], g[2], g[3]) end
    redis.call('HSET', key, id, table.concat(words, ' '))
  else
    redis.call('HDEL', key, id)
  end
end
redis.call('HSET', key, '~w', window)
redis.call('PEXPIRE', key, 3 * ttl)
return grant
