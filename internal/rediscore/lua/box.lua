-- The penalty box, after a body: r is its answer (common.lua). A refused
-- refund stays refused; a boxed key's is a denial until the box ends; a
-- take denied, or a charge that did not fit, boxes the key from now0. Then
-- the news of a change, if any, goes out (common.lua: news).
if kblock and r[1] ~= 2 then
  if not boxed_until and r[1] == 0 and (op0 == 'take' or op0 == 'charge') then
    boxed_until = now0 + block
    redis.call('SET', kblock, int_text(boxed_until), 'PX', ttl_text(math.floor((block + 999) / 1000) + slack))
  end
  if boxed_until then r = {0, maxcost, boxed_until, boxed_until - now0, now0} end
end
if news and r[1] ~= 2 then redis.pcall('PUBLISH', 'CHANNEL', news) end
return r
