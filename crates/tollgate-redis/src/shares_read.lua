-- Reads, atomically, what one shares call needs: Redis TIME, the fleet's
-- starter policy ("" if none yet), every
-- registration, the caller's dirty keys, a sample of the graveyard (keys
-- of reclaimed holders still to tidy), and the books of the reported,
-- dirty and sampled keys. Every value comes back as a string; a missing
-- book as "". Keys all share the hash tag of KEYS[1] (one cluster slot).
--
-- KEYS[1]  the members hash (<p>m)
-- ARGV[1]  the key prefix <p> (ending in "tg{shares}:")
-- ARGV[2]  the caller's holder id
-- ARGV[3]  how many graveyard keys to sample
-- ARGV[4…] the reported keys
local p = ARGV[1]
local t = redis.call('TIME')
local out = { t[1], t[2], redis.call('GET', p .. 's') or '' }
local members = redis.call('HGETALL', KEYS[1])
out[#out + 1] = tostring(#members / 2)
for i = 1, #members do
  out[#out + 1] = members[i]
end
local dirty = redis.call('SMEMBERS', p .. 'd:' .. ARGV[2])
out[#out + 1] = tostring(#dirty)
for i = 1, #dirty do
  out[#out + 1] = dirty[i]
end
local sample = tonumber(ARGV[3])
local grave = {}
if sample > 0 then
  grave = redis.call('SRANDMEMBER', p .. 'g', sample)
end
out[#out + 1] = tostring(#grave)
for i = 1, #grave do
  out[#out + 1] = grave[i]
end
local function book(key)
  out[#out + 1] = redis.call('GET', p .. 'k:' .. key) or ''
end
for i = 4, #ARGV do
  book(ARGV[i])
end
for i = 1, #dirty do
  book(dirty[i])
end
for i = 1, #grave do
  book(grave[i])
end
return out
