-- Tollgate: the prelude of every script (check.lua, lease.lua), put in front
-- of each one's body when the crate is built, so each stays one EVALSHA.
-- It holds what both keep in the same keys: the clock, the TTLs, the exact
-- integer arithmetic and the writing of a schedule's state (its theoretical
-- arrival time, TAT, in fields 's' whole seconds and 'n' nanoseconds).
--
-- Redis runs the whole script, prelude included, on every call, and each
-- `local function` is a closure made anew each time: the prelude holds only
-- what both scripts call, so neither makes more closures than it needs.

-- The time every counter of the call is decided at: Redis TIME (one clock
-- for every instance), unless the call supplies it (the lab's virtual clock;
-- production never does). Both scripts take 7 values in ARGV per key; a
-- call that supplies the time adds 3 after them:
--   secs, nanos  the time to decide at, instead of Redis TIME
--   ttl_ms       the TTL every key written gets, instead of its freshness
local now_s, now_us, now_sub_ns
local fixed_ttl = nil
local supplied = #KEYS * 7
if #ARGV == supplied + 3 then
  now_s = tonumber(ARGV[supplied + 1])
  now_sub_ns = tonumber(ARGV[supplied + 2])
  now_us = math.floor(now_sub_ns / 1000)
  fixed_ttl = ARGV[supplied + 3]
else
  local t = redis.call('TIME')
  now_s = tonumber(t[1])
  now_us = tonumber(t[2])
  now_sub_ns = now_us * 1000
end
local now_total_us = now_s * 1000000 + now_us

local function int(x)
  return string.format('%.0f', x)
end

-- floor(free / step) for non-negative integers, exact in doubles.
local function units(free, step)
  local q = math.floor(free / step)
  if q * step > free then
    q = q - 1
  elseif (q + 1) * step <= free then
    q = q + 1
  end
  return q
end

-- The TTL of a key whose state is fresh again in `ns`: just past it.
local function ttl_ms(ns)
  if fixed_ttl then return fixed_ttl end
  return int(math.floor(ns / 1000000) + 1)
end

-- Writes a schedule's TAT `backlog` ns from now, or deletes the key when
-- the backlog is gone; with `floor`, the TAT is also the floor 'fs', 'fn'
-- that check.lua's give-backs respect (lease.lua's grants and returns).
-- Returns the TAT as whole seconds and nanoseconds (0, 0 when deleted).
local function store_tat(key, backlog, floor)
  if backlog <= 0 then
    redis.call('DEL', key)
    return 0, 0
  end
  local total = now_sub_ns + backlog
  local secs = math.floor(total / 1000000000)
  local ts, tn = now_s + secs, total - secs * 1000000000
  if floor then
    redis.call('HSET', key, 's', int(ts), 'n', int(tn), 'fs', int(ts), 'fn', int(tn))
  else
    redis.call('HSET', key, 's', int(ts), 'n', int(tn))
  end
  redis.call('PEXPIRE', key, ttl_ms(backlog))
  return ts, tn
end

