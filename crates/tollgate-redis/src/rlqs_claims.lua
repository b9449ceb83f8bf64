-- The quota service's claims board: each instance publishes what its Envoys
-- claim of each shared rule counter and reads the other instances' claims.
-- KEYS[i]: the board of counter i (one hash per counter, field = instance);
-- ARGV[1]: the instance, ARGV[2]: how long a claim lasts (ms),
-- ARGV[2 + i]: the instance's claim on counter i.
-- Returns, per counter, the other instances' live claims.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, id, ARGV[i + 2] .. ':' .. (now + ttl))
  local all = redis.call('HGETALL', key)
  local others = {}
  for j = 1, #all, 2 do
    local field, value = all[j], all[j + 1]
    local sep = string.find(value, ':', 1, true)
    local expiry = sep and tonumber(string.sub(value, sep + 1))
    if not expiry or expiry <= now then
      redis.call('HDEL', key, field)
    elseif field ~= id then
      others[#others + 1] = string.sub(value, 1, sep - 1)
    end
  end
  redis.call('PEXPIRE', key, ttl)
  out[i] = others
end
return out
