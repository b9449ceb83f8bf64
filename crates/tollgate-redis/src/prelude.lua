-- Tollgate: the prelude of the library (check.lua, lease.lua), put in
-- front of their bodies when the crate is built. It holds what both keep in the same keys: the clock, the TTLs, the exact
-- integer arithmetic and the two encodings of a counter's state.
--
-- Both encodings keep a counter under the same one key, `tg{…}…`, and
-- differ by the key's Redis type, so every call names exactly one key per
-- counter (Redis Cluster routes and migrates it as any other key).
--
-- Packed (a string): one value, set with its TTL in one SET ... PX:
-- little-endian doubles packed with Redis's `struct` library (integers up
-- to 2^53 are exact in them), read with one GET. Per kind:
--   schedule        TAT secs, TAT nanos [, floor secs, floor nanos]
--   fixed window    window number, count [, leased window, leased count]
--   sliding window  window number, previous count, current count
--   sliding log     (time µs, units) pairs, oldest first
-- The bracketed pair is lease.lua's floor, kept by check.lua's writes.
--
-- Hash (a hash, or a list for a sliding log): the format of the releases
-- before the packed one, as they wrote it: the same numbers as decimal
-- integers in hash fields (s n fs fn; i c li lc; i p c), a sliding log as
-- a list of time, units, time, units, ...; HSET (or RPUSH) then PEXPIRE.
--
-- Which format a counter's state is in, the same rule on every call
-- whatever the instance's setting: a string is packed; a hash (or list)
-- is in the hash format (so instances of an older release, which know
-- only that format, and this one share one state); a missing key gets a
-- new state in the configured encoding. With `packed` configured, a key in
-- the hash format is converted when first touched (its state written as a
-- string with the same TTL, in the same atomic call): the setting an
-- operator turns on only once no older instance is left, since an older
-- instance meeting a string gets WRONGTYPE (answered by its
-- on_store_error rule).
--
-- The prelude, check.lua and lease.lua are one Redis Functions library
-- (FUNCTION LOAD once; each call an FCALL of `check` or `lease` in one of
-- the two encodings), so their functions are made once at load, not on
-- every call. On a Redis without Functions the same code runs as a script
-- (EVALSHA) per call instead: the library's text with a last line calling
-- `check` or `lease` on KEYS, ARGV and the encoding.

-- The time every counter of the call is decided at: Redis TIME (one clock
-- for every instance), unless the call supplies it (the lab's virtual clock;
-- production never does). check.lua takes one value in ARGV per key,
-- lease.lua 7 (`per_key`); a call that supplies the time adds 3 after them:
--   secs, nanos  the time to decide at, instead of Redis TIME
--   ttl_ms       the TTL every key written gets, instead of its freshness
-- set_clock sets these at the start of every call (Redis runs one call at
-- a time).
local now_s, now_us, now_sub_ns, now_total_us
local fixed_ttl = nil

-- Whether a counter with no state yet is created packed ('p'), not in
-- the hash format ('h'); the entry sets it on every call.
local create_packed = false

-- The library functions of the hot paths, as upvalues: reaching one costs
-- less than a global's field. Bound on a call, not at load (a library's
-- code runs at FUNCTION LOAD without `redis.call` and `struct`).
local rcall, rpcall, spack, sunpack, min, max, format

local function bind_library()
  rcall, rpcall, spack, sunpack = redis.call, redis.pcall, struct.pack, struct.unpack
  min, max, format = math.min, math.max, string.format
end

local function set_clock(keys, args, encoding, per_key)
  if not rcall then bind_library() end
  create_packed = encoding == 'p'
  local supplied = #keys * per_key
  if #args == supplied + 3 then
    now_s = args[supplied + 1] + 0
    now_sub_ns = args[supplied + 2] + 0
    now_us = now_sub_ns / 1000
    now_us = now_us - now_us % 1
    fixed_ttl = args[supplied + 3]
  else
    -- `+ 0` converts as tonumber does, parsing once where tonumber parses twice.
    local t = rcall('TIME')
    now_s = t[1] + 0
    now_us = t[2] + 0
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

-- The TTL of a key whose state is fresh again in `ns`: just past it, as
-- the text of a whole number of ms (redis.call would write a Lua number
-- with printf's %.17g, which costs several times more). Every span is at
-- most 2^61 ns (tollgate-core refuses longer ones), so the TTL stays below
-- 10^13 ms, well inside the integer `%d` writes.
local function ttl_ms(ns)
  if fixed_ttl then return fixed_ttl end
  local ms = ns / 1000000
  return format('%d', ms - ms % 1 + 1)
end

-- A schedule's or fixed window's state `v` (packed) as its two values,
-- then the lease floor's two (nil without one); nothing when v is nil.
local function get_pair(v)
  if not v then return nil end
  if #v > 16 then
    local a, b, c, d = sunpack('<dddd', v)
    return a, b, c, d
  end
  local a, b = sunpack('<dd', v)
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
    return spack('<dddd', ts, tn, fs, fn), ttl_ms(backlog), ts, tn
  end
  return spack('<dd', ts, tn), ttl_ms(backlog), ts, tn
end

-- The hash format's field names of a schedule ('s') and a fixed window ('f').
local pair_fields = {s = {'s', 'n', 'fs', 'fn'}, f = {'i', 'c', 'li', 'lc'}}

-- A number as decimal digits (redis.call would pass large ones with an exponent).
local function int(x)
  return format('%.0f', x)
end

-- The state of kind `kind` held in the hash format at `hkey`, as the
-- packed value it stands for; nil when the key is missing.
local function read_hash(hkey, kind)
  if kind == 'l' then
    local raw = rcall('LRANGE', hkey, 0, -1)
    if #raw == 0 then return nil end
    local records = {}
    for j = 1, #raw - 1, 2 do
      records[#records + 1] = spack('<dd', raw[j] + 0, raw[j + 1] + 0)
    end
    return table.concat(records)
  end
  if kind == 'w' then
    local st = rcall('HMGET', hkey, 'i', 'p', 'c')
    if not st[1] then return nil end
    return spack('<ddd', st[1] + 0, st[2] + 0, st[3] + 0)
  end
  local f = pair_fields[kind]
  local st = rcall('HMGET', hkey, f[1], f[2], f[3], f[4])
  if not st[1] then return nil end
  if st[3] then
    return spack('<dddd', st[1] + 0, st[2] + 0, st[3] + 0, st[4] + 0)
  end
  return spack('<dd', st[1] + 0, st[2] + 0)
end

-- Writes the packed value `value` of kind `kind` in the hash format at
-- `hkey` with its TTL in ms (false: the key's TTL stays), as the releases
-- before the packed one did.
local function write_hash(hkey, kind, value, ttl)
  if kind == 'l' then
    local flat = {}
    for pos = 1, #value, 16 do
      local t, c = sunpack('<dd', value, pos)
      flat[#flat + 1] = int(t)
      flat[#flat + 1] = int(c)
    end
    rcall('DEL', hkey)
    rcall('RPUSH', hkey, unpack(flat))
  elseif kind == 'w' then
    local i, p, c = sunpack('<ddd', value)
    rcall('HSET', hkey, 'i', int(i), 'p', int(p), 'c', int(c))
  else
    local f = pair_fields[kind]
    if #value > 16 then
      local a, b, c, d = sunpack('<dddd', value)
      rcall('HSET', hkey, f[1], int(a), f[2], int(b), f[3], int(c), f[4], int(d))
    else
      local a, b = sunpack('<dd', value)
      rcall('HSET', hkey, f[1], int(a), f[2], int(b))
    end
  end
  if ttl then rcall('PEXPIRE', hkey, ttl) end
end

-- Whether the error `e` (raised or answered by a Redis command) is
-- WRONGTYPE: the key holds the other format.
local function wrong_type(e)
  local msg = type(e) == 'table' and e.err or tostring(e)
  return string.find(msg, 'WRONGTYPE', 1, true) ~= nil
end

-- A counter's state (packed, nil when it has none) and, when it lives in
-- the hash format, its key again (nil: packed), by the rule at the top.
-- Each setting first reads the format it creates, so the other costs a
-- command only where it is found: with `hash`, the hash read (HMGET, or
-- LRANGE for a sliding log) answers nothing for a missing key and
-- WRONGTYPE for a string, then read with GET; with `packed`, GET answers a
-- string or nothing, and WRONGTYPE for a hash (or list), which is then
-- read and converted. `kind` is the counter's kind.
local function read_state(key, kind)
  if not create_packed then
    local ok, v = pcall(read_hash, key, kind)
    if ok then return v, key end
    if not wrong_type(v) then error(v) end
    return rcall('GET', key), nil
  end
  local v = rpcall('GET', key)
  if type(v) ~= 'table' then return v, nil end
  if not wrong_type(v) then error(v) end
  v = read_hash(key, kind)
  if v then
    -- Convert in place, keeping the state's TTL (SET replaces a key of
    -- any type).
    local ttl = rcall('PTTL', key)
    if ttl > 0 then
      rcall('SET', key, v, 'PX', ttl)
    else
      rcall('SET', key, v)
    end
  end
  return v, nil
end

-- Writes a counter's state (packed `value` with its TTL in ms, or false
-- to keep the key's TTL, for a key that exists; a value of false deletes
-- it) at `key` in the format read_state found: packed when `hkey` is nil,
-- else the hash format (`hkey` is then `key`).
local function put(key, hkey, kind, value, ttl)
  if not value then
    rcall('DEL', hkey or key)
  elseif hkey then
    write_hash(hkey, kind, value, ttl)
  elseif ttl then
    rcall('SET', key, value, 'PX', ttl)
  else
    rcall('SET', key, value, 'KEEPTTL')
  end
end
