-- Tollgate: the prelude of the library (check.lua, lease.lua), put in
-- front of their bodies when the crate is built. It holds what both keep in the same keys: the clock, the TTLs, the exact
-- integer arithmetic and the encoding of a counter's state.
--
-- Every counter is one string value, set with its TTL in one SET ... PX:
-- little-endian doubles packed with Redis's `struct` library (integers up
-- to 2^53 are exact in them), read with one GET. Per kind:
--   schedule        TAT secs, TAT nanos [, floor secs, floor nanos]
--   fixed window    window number, count [, leased window, leased count]
--   sliding window  window number, previous count, current count
--   sliding log     (time µs, units) pairs, oldest first
-- The bracketed pair is lease.lua's floor, kept by check.lua's writes.
--
-- The prelude, check.lua and lease.lua are one Redis Functions library
-- (FUNCTION LOAD once; each call an FCALL of `check` or `lease`), so their
-- functions are made once at load, not on every call. On a Redis without
-- Functions the same code runs as a script (EVALSHA) per call instead: the
-- library's text with a last line calling `check` or `lease` on KEYS, ARGV.

-- The time every counter of the call is decided at: Redis TIME (one clock
-- for every instance), unless the call supplies it (the lab's virtual clock;
-- production never does). Both take 7 values in ARGV per key; a call that
-- supplies the time adds 3 after them:
--   secs, nanos  the time to decide at, instead of Redis TIME
--   ttl_ms       the TTL every key written gets, instead of its freshness
-- set_clock sets these at the start of every call (Redis runs one call at
-- a time).
local now_s, now_us, now_sub_ns, now_total_us
local fixed_ttl = nil

local function set_clock(keys, args)
  local supplied = #keys * 7
  if #args == supplied + 3 then
    now_s = tonumber(args[supplied + 1])
    now_sub_ns = tonumber(args[supplied + 2])
    now_us = math.floor(now_sub_ns / 1000)
    fixed_ttl = args[supplied + 3]
  else
    local t = redis.call('TIME')
    now_s = tonumber(t[1])
    now_us = tonumber(t[2])
    now_sub_ns = now_us * 1000
    fixed_ttl = nil
  end
  now_total_us = now_s * 1000000 + now_us
end

-- The hot paths write floor(x) as `x - x % 1` (Lua's % is floored, so
-- this is exact for every double) to spare a call of math.floor.

-- floor(free / step) for non-negative integers, exact in doubles.
local function units(free, step)
  local q = free / step
  q = q - q % 1
  if q * step > free then
    q = q - 1
  elseif (q + 1) * step <= free then
    q = q + 1
  end
  return q
end

-- The TTL of a key whose state is fresh again in `ns`: just past it. Every
-- span is at most 2^61 ns (tollgate-core refuses longer ones), so the TTL
-- stays below 10^13 ms, which redis.call passes as plain digits (from 10^17
-- on it would pass an exponent form, which SET refuses).
local function ttl_ms(ns)
  if fixed_ttl then return fixed_ttl end
  local ms = ns / 1000000
  return ms - ms % 1 + 1
end

-- Reads a schedule's or fixed window's state: its two values, then the
-- lease floor's two (nil without one); nothing when the key is missing.
local function get_pair(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  if #v > 16 then
    local a, b, c, d = struct.unpack('<dddd', v)
    return a, b, c, d
  end
  local a, b = struct.unpack('<dd', v)
  return a, b
end

-- A schedule's state with its TAT `backlog` ns from now: the value and its
-- TTL, then the TAT as whole seconds and nanoseconds; the value is false
-- (delete the key) when the backlog is gone. The floor is (fs, fn), none
-- when fs is nil, or the TAT itself when fs is true (lease.lua's grants).
local function tat_state(backlog, fs, fn)
  if backlog <= 0 then return false, 0, 0, 0 end
  local total = now_sub_ns + backlog
  local secs = total / 1000000000
  secs = secs - secs % 1
  local ts, tn = now_s + secs, total - secs * 1000000000
  if fs == true then fs, fn = ts, tn end
  if fs then
    return struct.pack('<dddd', ts, tn, fs, fn), ttl_ms(backlog), ts, tn
  end
  return struct.pack('<dd', ts, tn), ttl_ms(backlog), ts, tn
end

-- Writes a string state with its TTL in ms, or deletes the key (false).
local function put(key, value, ttl)
  if value then
    redis.call('SET', key, value, 'PX', ttl)
  else
    redis.call('DEL', key)
  end
end
