-- Tollgate: grants or returns a quota lease on one counter, in one atomic call.
--
-- KEYS[1] is a counter, the same key check.lua decides, so instances in
-- exact mode and in leased mode share one budget. ARGV:
--   op      'g' grant, 'r' return
--   kind    's' schedule (token bucket, GCRA, leaky-bucket policer:
--           p1 interval ns, p2 capacity), 'f' fixed window (p1 window in
--           whole microseconds, p2 limit)
--   p1, p2  the algorithm's parameters
--   grant:  a1 units wanted, a2 share divisor (grant at most available / a2)
--   return: a1 unused units, a2 a3 the lease's token from its grant
-- Returns 5 integers: units granted (or taken back), how long the lease
-- lasts in ns (a schedule's backlog after the grant, a window's time to its
-- end), units remaining, and the token (a schedule's TAT as seconds and
-- nanoseconds, a window's number and 0).
--
-- Units leave the budget when granted, so leases never over-admit. Beside
-- the counter each grant keeps a floor that check.lua's give-backs respect,
-- so a refund never eats into leased units: for a schedule 'fs' 'fn', the
-- TAT of the last grant (or return); for a fixed window 'lc',
-- the units leased in window 'li'. A schedule's lease is taken back only
-- while the TAT is still the one its grant left (nothing was taken or
-- given back after it); otherwise its units decay with time. A window's
-- lease is taken back only inside its window.

-- The clock (now_*), int, units, ttl_ms and store_tat are prelude.lua's
-- (its supplied time, 3 values after these 7, is never passed here).

local key = KEYS[1]
local op, kind = ARGV[1], ARGV[2]
local p1, p2 = tonumber(ARGV[3]), tonumber(ARGV[4])
local a1, a2, a3 = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

local function schedule(interval, capacity)
  local st = redis.call('HMGET', key, 's', 'n')
  local backlog = 0
  if st[1] then
    backlog = (tonumber(st[1]) - now_s) * 1000000000 + (tonumber(st[2]) - now_sub_ns)
    if backlog < 0 then backlog = 0 end
  end
  local span = capacity * interval
  local available = units(span - math.min(backlog, span), interval)
  if op == 'g' then
    local g = math.min(a1, math.floor(available / a2))
    if g <= 0 then return {0, backlog, available, 0, 0} end
    local after = backlog + g * interval
    local ts, tn = store_tat(key, after, true)
    return {g, after, available - g, ts, tn}
  end
  if not st[1] or tonumber(st[1]) ~= a2 or tonumber(st[2]) ~= a3 then
    return {0, backlog, available, 0, 0}
  end
  local after = math.max(backlog - a1 * interval, 0)
  store_tat(key, after, true)
  return {units(backlog - after, interval), after, units(span - after, interval), 0, 0}
end

local function fixed(window, limit)
  local index = math.floor(now_total_us / window)
  local reset_ns = ((index + 1) * window - now_total_us) * 1000
  local st = redis.call('HMGET', key, 'i', 'c', 'li', 'lc')
  local stored = tonumber(st[1])
  local count, leased = 0, 0
  if stored == index then count = tonumber(st[2]) end
  if tonumber(st[3]) == index then leased = tonumber(st[4]) end
  local available = math.max(limit - count, 0)
  local function store(c, l)
    redis.call('HSET', key, 'i', int(index), 'c', int(c), 'li', int(index), 'lc', int(l))
    redis.call('PEXPIRE', key, int(math.floor(reset_ns / 1000000) + 1))
  end
  if op == 'g' then
    -- A window ahead of this one (a simulation's supplied time) is left alone.
    local g = 0
    if not stored or stored <= index then g = math.min(a1, math.floor(available / a2)) end
    if g <= 0 then return {0, reset_ns, available, index, 0} end
    store(count + g, leased + g)
    return {g, reset_ns, available - g, index, 0}
  end
  if stored ~= index or a2 ~= index or count > limit then
    return {0, reset_ns, available, 0, 0}
  end
  local back = math.min(a1, count, leased)
  store(count - back, leased - back)
  return {back, reset_ns, available + back, 0, 0}
end

if kind == 's' then return schedule(p1, p2) end
if kind == 'f' then return fixed(p1, p2) end
return redis.error_reply('tollgate: counter kind ' .. tostring(kind) .. ' is not leased')
