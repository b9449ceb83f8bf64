-- The quota service's claims board: each instance publishes what each of
-- its Envoys claims of each shared rule counter and reads the other
-- instances' Envoys' claims.
-- KEYS[2i - 1]: counter i's board of Envoys' claims (one hash per counter,
-- field = instance, value = 'c1,c2,...:lapses at');
-- KEYS[2i]: its board of instance totals (value = 'total:lapses at'), the
-- only one an instance of the earlier release writes and reads.
-- ARGV[1]: the instance, ARGV[2]: how long a claim lasts (ms),
-- ARGV[1 + 2i]: the instance's Envoys' claims on counter i ('c1,c2,...'),
-- ARGV[2 + 2i]: their total.
-- Returns, per counter, the other instances' live claims: each Envoy's
-- from the first board, and the total of an instance found only on the
-- second (as one claimant).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local lapses = ':' .. (now + ttl)

-- Calls `each` with every other instance's live claim on `key` (this
-- instance's excepted), dropping the lapsed ones.
local function live(key, each)
  local all = redis.call('HGETALL', key)
  for j = 1, #all, 2 do
    local field, value = all[j], all[j + 1]
    local sep = string.find(value, ':', 1, true)
    local expiry = sep and tonumber(string.sub(value, sep + 1))
    if not expiry or expiry <= now then
      redis.call('HDEL', key, field)
    elseif field ~= id then
      each(field, string.sub(value, 1, sep - 1))
    end
  end
  redis.call('PEXPIRE', key, ttl)
end

local out = {}
for i = 1, #KEYS / 2 do
  local envoys, totals = KEYS[2 * i - 1], KEYS[2 * i]
  redis.call('HSET', envoys, id, ARGV[1 + 2 * i] .. lapses)
  redis.call('HSET', totals, id, ARGV[2 + 2 * i] .. lapses)
  local others, listed = {}, {}
  live(envoys, function(field, claims)
    listed[field] = true
    for claim in string.gmatch(claims, '%d+') do
      others[#others + 1] = claim
    end
  end)
  live(totals, function(field, total)
    if not listed[field] then
      others[#others + 1] = total
    end
  end)
  out[i] = others
end
return out
