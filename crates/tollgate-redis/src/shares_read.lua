-- Reads, atomically, what one shares call needs: Redis TIME (or the
-- supplied time of a simulation), the fleet's
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
-- ARGV[4]  "" (decide at Redis TIME: production), or the seconds of a
--          supplied time (the lab's virtual clock; production never passes one)
-- ARGV[5]  the supplied time's nanoseconds ("" with ARGV[4] "")
-- ARGV[6…] the reported keys
-- Answers the time (seconds, nanoseconds) first.
local p = ARGV[1]
local secs, nanos = ARGV[4], ARGV[5]
if secs == '' then
  local t = redis.call('TIME')
  secs, nanos = t[1], tostring(tonumber(t[2]) * 1000)
end
local out = { secs, nanos, redis.call('GET', p .. 's') or '' }
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
for i = 6, #ARGV do
  book(ARGV[i])
end
for i = 1, #dirty do
  book(dirty[i])
end
for i = 1, #grave do
  book(grave[i])
end
return out
