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
-- so a refund never eats into leased units (the last two values of the
-- key's state, prelude.lua): for a schedule, the TAT of the last grant (or
-- return); for a fixed window, the window number and the units leased in it. A schedule's lease is taken back only
-- while the TAT is still the one its grant left (nothing was taken or
-- given back after it); otherwise its units decay with time. A window's
-- lease is taken back only inside its window.

-- The clock (set_clock, now_*), units, ttl_ms, get_pair, tat_state,
-- read_state, put, the two encodings of the state and the rule for which
-- key holds it are prelude.lua's (its supplied time, 3 values after these
-- 7, is never passed here).

local function lease_schedule(key, op, interval, capacity, a1, a2, a3)
  local v, hkey = read_state(key, 's')
  local s, n = get_pair(v)
  local backlog = 0
  if s then
    backlog = (s - now_s) * 1000000000 + (n - now_sub_ns)
    if backlog < 0 then backlog = 0 end
  end
  local span = capacity * interval
  local available = units(span - math.min(backlog, span), interval)
  if op == 'g' then
    local g = math.min(a1, math.floor(available / a2))
    if g <= 0 then return {0, backlog, available, 0, 0} end
    local after = backlog + g * interval
    local value, ttl, ts, tn = tat_state(after, true)
    put(key, hkey, 's', value, ttl)
    return {g, after, available - g, ts, tn}
  end
  if not s or s ~= a2 or n ~= a3 then
    return {0, backlog, available, 0, 0}
  end
  local after = math.max(backlog - a1 * interval, 0)
  put(key, hkey, 's', tat_state(after, true))
  return {units(backlog - after, interval), after, units(span - after, interval), 0, 0}
end

local function lease_fixed(key, op, window, limit, a1, a2)
  local index = math.floor(now_total_us / window)
  local reset_ns = ((index + 1) * window - now_total_us) * 1000
  local v, hkey = read_state(key, 'f')
  local stored, c, li, lc = get_pair(v)
  local count, leased = 0, 0
  if stored then
    if stored == index then count = c end
    if li == index then leased = lc end
  end
  local available = math.max(limit - count, 0)
  local ttl = math.floor(reset_ns / 1000000) + 1
  if op == 'g' then
    -- A window ahead of this one (a simulation's supplied time) is left alone.
    local g = 0
    if not stored or stored <= index then g = math.min(a1, math.floor(available / a2)) end
    if g <= 0 then return {0, reset_ns, available, index, 0} end
    put(key, hkey, 'f', struct.pack('<dddd', index, count + g, index, leased + g), ttl)
    return {g, reset_ns, available - g, index, 0}
  end
  if stored ~= index or a2 ~= index or count > limit then
    return {0, reset_ns, available, 0, 0}
  end
  local back = math.min(a1, count, leased)
  put(key, hkey, 'f', struct.pack('<dddd', index, count - back, index, leased - back), ttl)
  return {back, reset_ns, available + back, 0, 0}
end

-- The call: KEYS and ARGV as described at the top; `encoding` as check's.
local function lease(keys, args, encoding)
  set_clock(keys, args, encoding, 7)
  local key, op, kind = keys[1], args[1], args[2]
  local p1, p2 = tonumber(args[3]), tonumber(args[4])
  local a1, a2, a3 = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  if kind == 's' then return lease_schedule(key, op, p1, p2, a1, a2, a3) end
  if kind == 'f' then return lease_fixed(key, op, p1, p2, a1, a2) end
  return redis.error_reply('tollgate: counter kind ' .. tostring(kind) .. ' is not leased')
end
