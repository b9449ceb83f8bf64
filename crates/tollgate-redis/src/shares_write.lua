-- Writes what one shares call decided, only if nothing it read changed
-- since: each book and registration it relies on carries the version it
-- read (0: absent); any other version answers 0 and writes nothing (the
-- caller reads again and decides again). Otherwise applies every
-- operation and answers 1.
--
-- KEYS[1]  the members hash (<p>m)
-- ARGV[1]  the key prefix <p>
-- ARGV[2…] operations of 5 arguments each: op, a, b, c, d
--   b  key  version  value  ttl_ms  a book: "=" checks only, "" deletes,
--                                   else set (expiring after ttl_ms if > 0)
--   m  id   version  value  -       a registration: "" removes it (its
--                                   dirty keys go, its held keys move to
--                                   the graveyard), else set
--   d+ / d-  id  key               the holder's dirty keys (d+ only while registered)
--   h+ / h-  id  key               the holder's held keys
--   g-  key                         a graveyard key tidied
--   s   -    0        value         the starter policy, only if none is set
--   o   slot owner    new owner     a starter slot's owner ("" none):
--                                   checked against the owner read
local p = ARGV[1]
local members = KEYS[1]
local function version(v)
  if not v then
    return 0
  end
  return tonumber(string.match(v, '^(%d+)')) or 0
end
for i = 2, #ARGV, 5 do
  local op, a, b = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if op == 'b' then
    if version(redis.call('GET', p .. 'k:' .. a)) ~= b then
      return 0
    end
  elseif op == 'm' then
    if version(redis.call('HGET', members, a)) ~= b then
      return 0
    end
  elseif op == 's' then
    if redis.call('EXISTS', p .. 's') == 1 then
      return 0
    end
  elseif op == 'o' then
    if (redis.call('HGET', p .. 'o', a) or '') ~= ARGV[i + 2] then
      return 0
    end
  end
end
for i = 2, #ARGV, 5 do
  local op, a, b, c, d = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if op == 'b' then
    local key = p .. 'k:' .. a
    if c == '' then
      redis.call('DEL', key)
    elseif c ~= '=' then
      if d ~= '0' then
        redis.call('SET', key, c, 'PX', d)
      else
        redis.call('SET', key, c)
      end
    end
  elseif op == 'm' then
    if c == '' then
      redis.call('HDEL', members, a)
      redis.call('DEL', p .. 'd:' .. a)
      -- Its keys join the graveyard: added in chunks (unpack's bound),
      -- at the cost of the keys it held, never of the graveyard's size.
      local held = p .. 'h:' .. a
      local keys = redis.call('SMEMBERS', held)
      for j = 1, #keys, 1000 do
        redis.call('SADD', p .. 'g', unpack(keys, j, math.min(j + 999, #keys)))
      end
      redis.call('DEL', held)
    else
      redis.call('HSET', members, a, c)
    end
  elseif op == 'd+' then
    if redis.call('HEXISTS', members, a) == 1 then
      redis.call('SADD', p .. 'd:' .. a, b)
    end
  elseif op == 'd-' then
    redis.call('SREM', p .. 'd:' .. a, b)
  elseif op == 'h+' then
    redis.call('SADD', p .. 'h:' .. a, b)
  elseif op == 'h-' then
    redis.call('SREM', p .. 'h:' .. a, b)
  elseif op == 'g-' then
    redis.call('SREM', p .. 'g', a)
  elseif op == 's' then
    redis.call('SET', p .. 's', c)
  elseif op == 'o' then
    if c == '' then
      redis.call('HDEL', p .. 'o', a)
    else
      redis.call('HSET', p .. 'o', a, c)
    end
  end
end
return 1
