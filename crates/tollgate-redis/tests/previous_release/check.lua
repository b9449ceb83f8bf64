-- Tollgate: decides and consumes every counter of one request in one atomic call.
--
-- KEYS[k] is a counter; ARGV holds 7 values per counter, in KEYS order:
--   group  all-or-nothing group (one descriptor of the request)
--   op     'c' consume, 'r' give back
--   kind   's' schedule (token bucket, GCRA, leaky bucket: interval ns, capacity)
--          'f' fixed window, 'w' sliding window counter, 'l' sliding log
--          (window in whole microseconds, limit)
--   hits   units to consume or give back (0 = check only)
--   p1, p2 the algorithm's parameters as above
--   phase  a fixed window's stagger in microseconds (0: epoch-aligned): the
--          key's windows start at k*window - phase
-- Returns 4 integers per counter: outcome (0 allowed, 1 denied, 2 can never
-- pass), remaining, reset-after ns, retry-after ns.
--
-- Optional supplied time (the lab's virtual clock; production never passes
-- it): when ARGV holds 3 values after the counters' (#KEYS * 7 + 3), they are
--   secs, nanos  the time to decide at, instead of Redis TIME
--   ttl_ms       the TTL every key written gets, instead of its freshness
--
-- Time is Redis TIME (one clock for every instance). It never goes back for
-- a key: if TIME steps back (the Redis host's clock is set back), a window
-- key stays at the window its state was written in until TIME catches up,
-- so a used-up window cannot reopen; a schedule's state (its TAT) and a
-- log's entries are absolute times, which an earlier TIME only makes
-- stricter. A forward step moves windows and refills at once. Schedules keep their
-- theoretical arrival time as whole seconds + nanoseconds and are exact to
-- the nanosecond; windows work in microseconds (TIME's resolution). Within a
-- group nothing is written unless every counter allows, except fixed
-- windows, which count denied requests like envoyproxy/ratelimit.

-- The clock (now_*, a supplied time), int, units, ttl_ms and store_tat are
-- prelude.lua's.

-- Schedule: the state is the theoretical arrival time (TAT) of the next unit.
local function schedule(key, op, hits, interval, capacity)
  local st = redis.call('HMGET', key, 's', 'n')
  local backlog = 0
  if st[1] then
    backlog = (tonumber(st[1]) - now_s) * 1000000000 + (tonumber(st[2]) - now_sub_ns)
    if backlog < 0 then backlog = 0 end
  end
  local span = capacity * interval
  local function available(b)
    return units(span - math.min(b, span), interval)
  end
  if op == 'r' then
    local after = backlog - hits * interval
    if after < 0 then after = 0 end
    -- Never below the last lease's TAT (lease.lua's floor 'fs', 'fn').
    local f = redis.call('HMGET', key, 'fs', 'fn')
    if f[1] then
      local floor = (tonumber(f[1]) - now_s) * 1000000000 + (tonumber(f[2]) - now_sub_ns)
      if after < floor then after = math.min(floor, backlog) end
    end
    local write = nil
    if after ~= backlog then
      write = function() store_tat(key, after) end
    end
    return {0, available(after), after, 0}, write
  end
  if hits > capacity then
    return {2, available(backlog), backlog, 0}, nil
  end
  local after = backlog + hits * interval
  if after <= span then
    local write = nil
    if hits > 0 then
      write = function() store_tat(key, after) end
    end
    return {0, units(span - after, interval), after, 0}, write
  end
  return {1, available(backlog), backlog, after - span}, nil
end

-- Fixed window: the state is the window number and its count.
local function fixed(key, op, hits, window, limit, phase)
  local now_total_us = now_total_us + phase
  local index = math.floor(now_total_us / window)
  local st = redis.call('HMGET', key, 'i', 'c')
  local count = 0
  if st[1] then
    local stored = tonumber(st[1])
    if stored == index then
      count = tonumber(st[2])
    elseif stored > index and tonumber(st[2]) > 0 then
      -- TIME stepped back: hold at the window the key has seen.
      index = stored
      count = tonumber(st[2])
    end
  end
  local reset_us = (index + 1) * window - now_total_us
  local function store(after)
    return function()
      redis.call('HSET', key, 'i', int(index), 'c', int(after))
      redis.call('PEXPIRE', key, ttl_ms(reset_us * 1000))
    end
  end
  if op == 'r' then
    local after = count
    -- Never below the units leased in this window (lease.lua's 'li', 'lc').
    local lease = redis.call('HMGET', key, 'li', 'lc')
    local leased = 0
    if tonumber(lease[1]) == index then leased = math.min(tonumber(lease[2]), count) end
    if count <= limit then after = math.max(count - hits, leased) end
    local write = nil
    if after ~= count then write = store(after) end
    return {0, math.max(limit - after, 0), reset_us * 1000, 0}, write
  end
  local after = count + hits
  if after <= limit then
    local write = nil
    if hits > 0 then write = store(after) end
    return {0, limit - after, reset_us * 1000, 0}, write
  end
  -- A denial counts up to limit + 1 and never lowers a count: a count over
  -- this limit (taken under a higher one before a reload lowered it) is the
  -- units already admitted or leased, and lowering it would hand them out again
  -- to an instance still on the higher limit, or after a lease's return.
  local kept = math.max(count, math.min(after, limit + 1))
  local write = nil
  if kept ~= count then write = store(kept) end
  if hits > limit then
    return {2, 0, reset_us * 1000, 0}, write
  end
  return {1, 0, reset_us * 1000, reset_us * 1000}, write
end

-- Sliding window counter: the state is the window number, the previous
-- window's count and the current one's.
local function sliding(key, op, hits, window, limit)
  local index = math.floor(now_total_us / window)
  local elapsed = now_total_us - index * window
  local st = redis.call('HMGET', key, 'i', 'p', 'c')
  local prev, cur = 0, 0
  if st[1] then
    local si, sp, sc = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
    if si == index then
      prev, cur = sp, sc
    elseif si > index and sp + sc > 0 then
      -- TIME stepped back: hold at the start of the window the key has seen.
      index, elapsed, prev, cur = si, 0, sp, sc
    elseif si == index - 1 then
      prev = sc
    end
  end
  local capacity = limit * window
  local function used()
    return prev * (window - elapsed) + cur * window
  end
  local function remaining()
    local free = capacity - used()
    if free < 0 then free = 0 end
    return units(free, window)
  end
  local function reset()
    if cur > 0 then
      return ((index + 2) * window - now_total_us) * 1000
    elseif prev > 0 then
      return ((index + 1) * window - now_total_us) * 1000
    end
    return 0
  end
  local function store()
    local p, c = prev, cur
    return function()
      if p + c == 0 then
        redis.call('DEL', key)
        return
      end
      redis.call('HSET', key, 'i', int(index), 'p', int(p), 'c', int(c))
      redis.call('PEXPIRE', key, ttl_ms(((index + 2) * window - now_total_us) * 1000))
    end
  end
  if op == 'r' then
    local before = cur
    cur = math.max(cur - hits, 0)
    local write = nil
    if cur ~= before then write = store() end
    return {0, remaining(), reset(), 0}, write
  end
  if hits > limit then
    return {2, remaining(), reset(), 0}, nil
  end
  if used() + hits * window <= capacity then
    cur = cur + hits
    local write = nil
    if hits > 0 then write = store() end
    return {0, remaining(), reset(), 0}, write
  end
  local start = index * window
  local pass = nil
  local room = limit - (cur + hits)
  if room >= 0 and prev > 0 then
    local slack = math.min(units(room * window, prev), window)
    local at = math.max(window - slack, elapsed)
    if at < window then pass = start + at end
  end
  if not pass then
    local next_start = start + window
    if cur == 0 then
      pass = next_start
    else
      local slack = math.min(units((limit - hits) * window, cur), window)
      if slack > 0 then
        pass = next_start + (window - slack)
      else
        pass = next_start + window
      end
    end
  end
  return {1, remaining(), reset(), (pass - now_total_us) * 1000}, nil
end

-- Sliding log: the state is a list of (time µs, units) pairs, oldest first.
local function log(key, op, hits, window, limit)
  local raw = redis.call('LRANGE', key, 0, -1)
  local ts, cs, total = {}, {}, 0
  local expired = false
  for j = 1, #raw, 2 do
    local tj, cj = tonumber(raw[j]), tonumber(raw[j + 1])
    if tj + window > now_total_us then
      ts[#ts + 1] = tj
      cs[#cs + 1] = cj
      total = total + cj
    else
      expired = true
    end
  end
  local function reset()
    if #ts == 0 then return 0 end
    return math.max(ts[#ts] + window - now_total_us, 0) * 1000
  end
  local function store()
    return function()
      redis.call('DEL', key)
      if #ts == 0 then return end
      local flat = {}
      for j = 1, #ts do
        flat[#flat + 1] = int(ts[j])
        flat[#flat + 1] = int(cs[j])
      end
      redis.call('RPUSH', key, unpack(flat))
      redis.call('PEXPIRE', key, ttl_ms((ts[#ts] + window - now_total_us) * 1000))
    end
  end
  if op == 'r' then
    local left = hits
    local changed = expired
    while left > 0 and #ts > 0 do
      local take = math.min(left, cs[#cs])
      cs[#cs] = cs[#cs] - take
      total = total - take
      left = left - take
      changed = true
      if cs[#cs] == 0 then
        ts[#ts] = nil
        cs[#cs] = nil
      end
    end
    local write = nil
    if changed then write = store() end
    return {0, limit - total, reset(), 0}, write
  end
  if hits > limit then
    return {2, limit - total, reset(), 0}, nil
  end
  if total + hits <= limit then
    local write = nil
    if hits > 0 then
      local last = ts[#ts]
      local at = now_total_us
      if last and last > at then at = last end
      if last == at then
        cs[#cs] = cs[#cs] + hits
      else
        ts[#ts + 1] = at
        cs[#cs + 1] = hits
      end
      total = total + hits
      write = store()
    end
    return {0, limit - total, reset(), 0}, write
  end
  local to_free = total + hits - limit
  local pass = now_total_us
  for j = 1, #ts do
    pass = ts[j] + window
    if cs[j] >= to_free then break end
    to_free = to_free - cs[j]
  end
  return {1, limit - total, reset(), (pass - now_total_us) * 1000}, nil
end

local kinds = {s = schedule, f = fixed, w = sliding, l = log}
local results = {}
local writes = {}
local denied = {}
for k = 1, #KEYS do
  local a = (k - 1) * 7
  local decide = kinds[ARGV[a + 3]]
  if not decide then
    return redis.error_reply('tollgate: unknown counter kind ' .. tostring(ARGV[a + 3]))
  end
  local r, write = decide(KEYS[k], ARGV[a + 2], tonumber(ARGV[a + 4]),
    tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]))
  if r[1] ~= 0 then denied[ARGV[a + 1]] = true end
  writes[k] = write
  for j = 1, 4 do
    results[#results + 1] = r[j]
  end
end
for k = 1, #KEYS do
  local a = (k - 1) * 7
  if writes[k] and (not denied[ARGV[a + 1]] or ARGV[a + 3] == 'f') then
    writes[k]()
  end
end
return results
