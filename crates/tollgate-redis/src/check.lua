-- Tollgate: decides and consumes every counter of one request in one atomic call.
--
-- KEYS[k] is a counter; ARGV holds one value per counter, in KEYS order: its
-- 7 parameters as decimal text, each followed by one space but the last
-- ("group op kind hits p1 p2 phase"; one ARGV element, not 7, because each
-- element costs Redis a string object and Lua an interned string per call):
--   group  all-or-nothing group (one descriptor of the request)
--   op     'c' consume, 'r' give back
--   kind   's' schedule (token bucket, GCRA, leaky bucket: interval ns, capacity)
--          'f' fixed window, 'w' sliding window counter, 'l' sliding log
--          (window in whole microseconds, limit)
--          'u' envoyproxy/ratelimit's fixed window, in its own key (unit in
--          seconds, limit; the 7th value is the key's TTL in seconds)
--   hits   units to consume or give back (0 = check only)
--   p1, p2 the algorithm's parameters as above
--   phase  a fixed window's stagger in microseconds (0: epoch-aligned): the
--          key's windows start at k*window - phase
-- Returns 4 numbers per counter: outcome (0 allowed, 1 denied, 2 can never
-- pass), remaining, reset-after ns, retry-after ns; for one counter as one
-- string of 4 little-endian doubles (one value for the client to read), for
-- more as an array of 4 integers per counter.
--
-- Optional supplied time (the lab's virtual clock; production never passes
-- it): when ARGV holds 3 values after the counters' (#KEYS + 3), they are
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

-- The clock (set_clock, now_*, a supplied time), units, ttl_ms, get_pair,
-- tat_state, read_state and put are prelude.lua's, and so are the two
-- encodings of each kind's state and the rule for which key holds it.
-- Each kind's function takes its state (packed, nil when none; a
-- schedule's and a fixed window's as get_pair's numbers) and returns
-- the counter's 4 integers, then the write it wants (the packed
-- value and its TTL; false deletes the key; nil writes nothing), which the
-- caller makes only if the group allows, where the state was found.

-- Schedule: the state is the theoretical arrival time (TAT) of the next
-- unit, `s` secs + `n` nanos (nil without state), then lease.lua's floor
-- (`fs`, `fn`; nil without one). A consumption (the common case) has its
-- helpers (units, tat_state, ttl_ms) written in line: each Lua call costs
-- about as much as a tenth of the Lua of a whole check.
local function schedule(op, hits, interval, capacity, s, n, fs, fn)
  local backlog = 0
  if s then
    backlog = (s - now_s) * 1000000000 + (n - now_sub_ns)
    if backlog < 0 then backlog = 0 end
  end
  local span = capacity * interval
  if op == 'r' then
    local after = backlog - hits * interval
    if after < 0 then after = 0 end
    -- Never below the last lease's TAT (lease.lua's floor).
    if fs then
      local floor = (fs - now_s) * 1000000000 + (fn - now_sub_ns)
      if after < floor then after = min(floor, backlog) end
    end
    local left = units(span - min(after, span), interval)
    if after ~= backlog then
      return 0, left, after, 0, tat_state(after, fs, fn)
    end
    return 0, left, after, 0
  end
  -- The backlog once this call is decided (reset), and the TAT's backlog
  -- to write (nil: nothing to write).
  local outcome, reset, retry, after = 0, backlog, 0, nil
  if hits > capacity then
    outcome = 2
  else
    local wanted = backlog + hits * interval
    if wanted > span then
      outcome, retry = 1, wanted - span
    else
      reset = wanted
      if hits > 0 then after = wanted end
    end
  end
  -- units(span - min(reset, span), interval)
  local free = 0
  if reset < span then free = span - reset end
  local left = free / interval
  left = left - left % 1
  if left * interval > free then
    left = left - 1
  elseif (left + 1) * interval <= free then
    left = left + 1
  end
  if not after then return outcome, left, reset, retry end
  -- tat_state(after, fs, fn)
  if after <= 0 then return outcome, left, reset, retry, false, 0 end
  local total = now_sub_ns + after
  local secs = total / 1000000000
  secs = secs - secs % 1
  local ts, tn = now_s + secs, total - secs * 1000000000
  local ttl = fixed_ttl
  if not ttl then
    local ms = after / 1000000
    ttl = format('%d', ms - ms % 1 + 1)
  end
  if fs then
    return outcome, left, reset, retry, spack('<dddd', ts, tn, fs, fn), ttl
  end
  return outcome, left, reset, retry, spack('<dd', ts, tn), ttl
end

-- Fixed window: the state is the window number `stored` and its count `c`
-- (nil without state), then the leased window and count (`li`, `lc`; nil
-- without a lease), helpers in line as in schedule.
local function fixed(op, hits, window, limit, phase, stored, c, li, lc)
  local now_total_us = now_total_us + phase
  local index = now_total_us / window
  index = index - index % 1
  local count = 0
  if stored then
    if stored == index then
      count = c
    elseif stored > index and c > 0 then
      -- TIME stepped back: hold at the window the key has seen.
      index = stored
      count = c
    end
  end
  local reset_ns = ((index + 1) * window - now_total_us) * 1000
  local after
  local outcome, left, retry = 0, 0, 0
  if op == 'r' then
    after = count
    -- Never below the units leased in this window (lease.lua's).
    local leased = 0
    if li == index then leased = min(lc, count) end
    if count <= limit then after = max(count - hits, leased) end
    left = max(limit - after, 0)
  else
    after = count + hits
    if after <= limit then
      left = limit - after
    else
      -- A denial counts up to limit + 1 and never lowers a count: a count
      -- over this limit (taken under a higher one before a reload lowered
      -- it) is the units already admitted or leased, and lowering it would
      -- hand them out again to an instance still on the higher limit, or
      -- after a lease's return.
      after = max(count, min(after, limit + 1))
      if hits > limit then
        outcome = 2
      else
        outcome, retry = 1, reset_ns
      end
    end
  end
  if after == count then
    return outcome, left, reset_ns, retry
  end
  -- The key lives to the end of its window number at phase 0, the latest
  -- end that number has under any phase (so a reload turning `stagger` off
  -- within a window never finds its count expiring before the window's
  -- end): set by the write that starts a window (ttl_ms), and kept (false:
  -- SET ... KEEPTTL) by the writes after it in the same window, where
  -- changing the key's expiry would be the costliest part of the write.
  local ttl = fixed_ttl
  if not ttl then
    if stored == index then
      ttl = false
    else
      local ms = (reset_ns + phase * 1000) / 1000000
      ttl = format('%d', ms - ms % 1 + 1)
    end
  end
  if li then
    return outcome, left, reset_ns, retry, spack('<dddd', index, after, li, lc), ttl
  end
  return outcome, left, reset_ns, retry, spack('<dd', index, after), ttl
end

-- Sliding window counter, used units: prev weighted by what is left of
-- its window, plus cur (both scaled by the window).
local function sliding_used(prev, cur, window, elapsed)
  return prev * (window - elapsed) + cur * window
end

-- Sliding window counter: units that still fit.
local function sliding_left(prev, cur, window, elapsed, limit)
  local free = limit * window - sliding_used(prev, cur, window, elapsed)
  if free < 0 then free = 0 end
  return units(free, window)
end

-- Sliding window counter: ns until nothing counted is left.
local function sliding_reset(prev, cur, window, index)
  if cur > 0 then
    return ((index + 2) * window - now_total_us) * 1000
  elseif prev > 0 then
    return ((index + 1) * window - now_total_us) * 1000
  end
  return 0
end

-- Sliding window counter: the state to write (false deletes the key) and its TTL.
local function sliding_state(prev, cur, window, index)
  if prev + cur == 0 then return false, 0 end
  return spack('<ddd', index, prev, cur),
    ttl_ms(((index + 2) * window - now_total_us) * 1000)
end

-- Sliding window counter: the state is the window number, the previous
-- window's count and the current one's.
local function sliding(v, op, hits, window, limit)
  local index = now_total_us / window
  index = index - index % 1
  local elapsed = now_total_us - index * window
  local prev, cur = 0, 0
  if v then
    local si, sp, sc = sunpack('<ddd', v)
    if si == index then
      prev, cur = sp, sc
    elseif si > index and sp + sc > 0 then
      -- TIME stepped back: hold at the start of the window the key has seen.
      index, elapsed, prev, cur = si, 0, sp, sc
    elseif si == index - 1 then
      prev = sc
    end
  end
  if op == 'r' then
    local before = cur
    cur = max(cur - hits, 0)
    local left = sliding_left(prev, cur, window, elapsed, limit)
    local reset = sliding_reset(prev, cur, window, index)
    if cur ~= before then
      return 0, left, reset, 0, sliding_state(prev, cur, window, index)
    end
    return 0, left, reset, 0
  end
  if hits > limit then
    return 2, sliding_left(prev, cur, window, elapsed, limit),
      sliding_reset(prev, cur, window, index), 0
  end
  if sliding_used(prev, cur, window, elapsed) + hits * window <= limit * window then
    cur = cur + hits
    local left = sliding_left(prev, cur, window, elapsed, limit)
    local reset = sliding_reset(prev, cur, window, index)
    if hits > 0 then
      return 0, left, reset, 0, sliding_state(prev, cur, window, index)
    end
    return 0, left, reset, 0
  end
  local start = index * window
  local pass = nil
  local room = limit - (cur + hits)
  if room >= 0 and prev > 0 then
    local slack = min(units(room * window, prev), window)
    local at = max(window - slack, elapsed)
    if at < window then pass = start + at end
  end
  if not pass then
    local next_start = start + window
    if cur == 0 then
      pass = next_start
    else
      local slack = min(units((limit - hits) * window, cur), window)
      if slack > 0 then
        pass = next_start + (window - slack)
      else
        pass = next_start + window
      end
    end
  end
  return 1, sliding_left(prev, cur, window, elapsed, limit),
    sliding_reset(prev, cur, window, index), (pass - now_total_us) * 1000
end

-- Sliding log: the state to write (false deletes the key) and its TTL.
local function log_state(ts, cs, window)
  if #ts == 0 then return false, 0 end
  local records = {}
  for j = 1, #ts do
    records[j] = spack('<dd', ts[j], cs[j])
  end
  return table.concat(records), ttl_ms((ts[#ts] + window - now_total_us) * 1000)
end

-- Sliding log: the state is a list of (time µs, units) pairs, oldest first.
local function log(v, op, hits, window, limit)
  local ts, cs, total = {}, {}, 0
  local expired = false
  if v then
    for pos = 1, #v, 16 do
      local tj, cj = sunpack('<dd', v, pos)
      if tj + window > now_total_us then
        ts[#ts + 1] = tj
        cs[#cs + 1] = cj
        total = total + cj
      else
        expired = true
      end
    end
  end
  local reset = 0
  if #ts > 0 then reset = max(ts[#ts] + window - now_total_us, 0) * 1000 end
  if op == 'r' then
    local left = hits
    local changed = expired
    while left > 0 and #ts > 0 do
      local take = min(left, cs[#cs])
      cs[#cs] = cs[#cs] - take
      total = total - take
      left = left - take
      changed = true
      if cs[#cs] == 0 then
        ts[#ts] = nil
        cs[#cs] = nil
      end
    end
    if #ts > 0 then
      reset = max(ts[#ts] + window - now_total_us, 0) * 1000
    else
      reset = 0
    end
    if changed then
      return 0, limit - total, reset, 0, log_state(ts, cs, window)
    end
    return 0, limit - total, reset, 0
  end
  if hits > limit then
    return 2, limit - total, reset, 0
  end
  if total + hits <= limit then
    if hits == 0 then
      return 0, limit - total, reset, 0
    end
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
    reset = max(ts[#ts] + window - now_total_us, 0) * 1000
    return 0, limit - total, reset, 0, log_state(ts, cs, window)
  end
  local to_free = total + hits - limit
  local pass = now_total_us
  for j = 1, #ts do
    pass = ts[j] + window
    if cs[j] >= to_free then break end
    to_free = to_free - cs[j]
  end
  return 1, limit - total, reset, (pass - now_total_us) * 1000
end

-- Upstream's fixed window (`--redis-key-format upstream`): the key is
-- envoyproxy/ratelimit's own, naming its window, and holds a plain integer
-- count written as upstream writes it, so upstream's pods and these share
-- one count: INCRBY by the hits (0 included), then EXPIRE with the TTL
-- the caller chose (the unit plus upstream's jitter), on every call,
-- denied or not. Over the limit when the count after the increment is
-- above it. A give-back lowers the count, never below 0, keeping the TTL.
local function upstream(key, op, hits, unit_s, limit, expire_s)
  local unit_us = unit_s * 1000000
  local reset_ns = (unit_us - now_total_us % unit_us) * 1000
  if op == 'r' then
    local count = tonumber(rcall('GET', key) or '0') or 0
    local after = max(count - hits, 0)
    if after ~= count then rcall('SET', key, after, 'KEEPTTL') end
    return 0, max(limit - after, 0), reset_ns, 0
  end
  -- A cost above the limit is denied whatever the count; it adds limit + 1,
  -- which closes the window as the whole cost would (a number Lua writes
  -- exactly, where a huge one would be refused by INCRBY).
  local add = min(hits, limit + 1)
  local after = rcall('INCRBY', key, add)
  rcall('EXPIRE', key, expire_s)
  if hits > limit then return 2, 0, reset_ns, 0 end
  if after <= limit then return 0, limit - after, reset_ns, 0 end
  return 1, 0, reset_ns, reset_ns
end

local kinds = {s = true, f = true, w = true, l = true, u = true}

-- The key of the counter `decide` decided last when its state is in the
-- hash format (nil: packed), kept here so that `decide` ends in a tail call.
local decided_hkey = nil

-- A counter's parameters by their text (an ARGV element, see the top), so
-- the text of a rule seen before is not split and parsed again: read as
-- `records[text] or record_of(text)`, a list {group, op, kind, hits, p1,
-- p2, phase} with the last four as numbers; nil for a text not of that
-- shape. Bounded: emptied at 256 entries (an upstream counter's, whose
-- phase is a random TTL, is not kept). A library keeps it from call to
-- call; a script (EVALSHA) starts empty.
local records, records_held = {}, 0

local function record_of(text)
  local group, op, kind, hits, p1, p2, p3 =
    string.match(text, '^(%d+) (%a) (%a) (%d+) (%d+) (%d+) (%d+)$')
  if not group then return nil end
  local r = {group, op, kind, hits + 0, p1 + 0, p2 + 0, p3 + 0}
  if kind ~= 'u' then
    if records_held >= 256 then records, records_held = {}, 0 end
    records[text] = r
    records_held = records_held + 1
  end
  return r
end

-- One counter's decision (its parameters `r`, a record_of): its 4 integers
-- and its write (see above); false for an unknown kind. decided_hkey
-- tells where the state was found.
local function decide(key, r)
  local kind = r[3]
  if not kinds[kind] then return false end
  local op, hits, p1, p2 = r[2], r[4], r[5], r[6]
  if kind == 'u' then
    -- Written here, as upstream writes it; nothing for the caller to put.
    decided_hkey = nil
    return upstream(key, op, hits, p1, p2, r[7])
  end
  local v
  v, decided_hkey = read_state(key, kind)
  if kind == 's' then return schedule(op, hits, p1, p2, get_pair(v)) end
  if kind == 'f' then return fixed(op, hits, p1, p2, r[7], get_pair(v)) end
  if kind == 'w' then return sliding(v, op, hits, p1, p2) end
  return log(v, op, hits, p1, p2)
end

-- The common call on its own path: one counter, a schedule or a fixed
-- window consuming (op 'c'), packed (encoding 'p'), at Redis TIME. The
-- same decision and write as the general path (decide, then put), with
-- the steps around the kind's function (set_clock, read_state, get_pair,
-- put) written in line: each Lua call costs about as much as a tenth of
-- the Lua of a whole check. `r` is the counter's record_of, `kind` its
-- kind. Answers the reply (the 32-byte string), or nil for a key it does
-- not take, which the general path then decides from the start: a key in
-- the hash format (GET answers WRONGTYPE: read_state converts it).
local function check_one_packed(key, r, kind)
  if not rcall then bind_library() end
  local t = rcall('TIME')
  local v = rpcall('GET', key)
  local a, b, c, d
  if v then
    -- A packed state is 16 or 32 bytes (get_pair); anything else, WRONGTYPE's
    -- error (a table, of length 0) included, is the general path's.
    local size = #v
    if size == 16 then
      a, b = sunpack('<dd', v)
    elseif size == 32 then
      a, b, c, d = sunpack('<dddd', v)
    else
      return nil
    end
  end
  -- set_clock, at Redis TIME.
  now_s, now_us = t[1] + 0, t[2] + 0
  now_sub_ns = now_us * 1000
  now_total_us = now_s * 1000000 + now_us
  fixed_ttl = nil
  local outcome, left, reset, retry, value, ttl
  if kind == 's' then
    outcome, left, reset, retry, value, ttl = schedule('c', r[4], r[5], r[6], a, b, c, d)
  else
    outcome, left, reset, retry, value, ttl = fixed('c', r[4], r[5], r[6], r[7], a, b, c, d)
  end
  -- put: a schedule wants a write only when it allows, a fixed window
  -- whenever its count moves.
  if value then
    if ttl then
      rcall('SET', key, value, 'PX', ttl)
    else
      rcall('SET', key, value, 'KEEPTTL')
    end
  elseif value == false then
    rcall('DEL', key)
  end
  return spack('<dddd', outcome, left, reset, retry)
end

local unknown = 'tollgate: unknown counter kind '
local malformed = 'tollgate: malformed counter parameters '

-- The call: KEYS and ARGV as described at the top; `encoding` ('h' or
-- 'p') is the one new counters are created in (prelude.lua).
local function check(keys, args, encoding)
  if #keys == 1 then
    -- One counter (most calls): its group is itself.
    local r = records[args[1]] or record_of(args[1])
    if r and encoding == 'p' and #args == 1 and r[2] == 'c' then
      local kind = r[3]
      if kind == 's' or kind == 'f' then
        local reply = check_one_packed(keys[1], r, kind)
        if reply then return reply end
      end
    end
    set_clock(keys, args, encoding, 1)
    if not r then return redis.error_reply(malformed .. tostring(args[1])) end
    local outcome, left, reset, retry, value, ttl = decide(keys[1], r)
    if outcome == false then return redis.error_reply(unknown .. r[3]) end
    if value ~= nil and (outcome == 0 or r[3] == 'f') then
      put(keys[1], decided_hkey, r[3], value, ttl)
    end
    return spack('<dddd', outcome, left, reset, retry)
  end
  set_clock(keys, args, encoding, 1)
  local results, values, ttls, hkeys, denied, params = {}, {}, {}, {}, {}, {}
  for k = 1, #keys do
    local r = records[args[k]] or record_of(args[k])
    if not r then return redis.error_reply(malformed .. tostring(args[k])) end
    params[k] = r
    local outcome, left, reset, retry, value, ttl = decide(keys[k], r)
    if outcome == false then return redis.error_reply(unknown .. r[3]) end
    if outcome ~= 0 then denied[r[1]] = true end
    if value ~= nil then values[k], ttls[k], hkeys[k] = value, ttl, decided_hkey end
    local n = #results
    results[n + 1], results[n + 2], results[n + 3], results[n + 4] = outcome, left, reset, retry
  end
  for k = 1, #keys do
    local r = params[k]
    if values[k] ~= nil and (not denied[r[1]] or r[3] == 'f') then
      put(keys[k], hkeys[k], r[3], values[k], ttls[k])
    end
  end
  return results
end
