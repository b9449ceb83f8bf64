# Sourced by the Redis benchmark scripts (bench-redis.sh, bench-lua.sh) from
# the repository root: starts a throwaway redis-server on a free loopback
# port, without persistence, behind the command in the array redis_pin if
# the caller set one (e.g. redis_pin=(taskset -c 1)); stops it and removes
# its directory on exit. Sets work, port and redis_pid; defines cli and
# load_bench_library.
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis_pid=""
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"${redis_pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" > "$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
    read -r -t 0.05 < /dev/zero || true # a bounded wait for Redis to start
done
cli() { redis-cli -p "$port" "$@"; }

# Loads this tree's Lua code as the library `tollgate_bench`, whose check
# functions are `tollgate_bench_check` (new counters as hashes, tollgate
# serve's default --redis-encoding) and `tollgate_bench_check_packed` (the
# code tollgate serve loads under a name with its hash).
load_bench_library() {
    local src=crates/tollgate-redis/src
    cli FUNCTION LOAD REPLACE "$(printf '#!lua name=tollgate_bench\n'; cat "$src/prelude.lua" "$src/check.lua" "$src/lease.lua"
        echo "redis.register_function('tollgate_bench_check', function(k, a) return check(k, a, 'h') end)"
        echo "redis.register_function('tollgate_bench_check_packed', function(k, a) return check(k, a, 'p') end)")" > /dev/null
}
