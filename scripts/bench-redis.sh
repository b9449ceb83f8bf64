#!/usr/bin/env bash
# Measures Tollgate on Redis in one run, next to the scripted ceiling of the
# same Redis on the same machine:
#
# 1. redis-benchmark calling Tollgate's own check function (FCALL, one
#    token-bucket counter per call), pipelined 16 deep with 50 clients, for
#    one hot key and for 100 000 keys: the most scripted decisions per second
#    this Redis can make.
# 2. `tollgate serve --store redis://…` under `tollgate bench rls` (64 in
#    flight) for one hot key and 100 000 keys: checks/s, p50/p99, server CPU
#    (and its system part: the kernel's share, socket work included)
#    and Redis CPU per check (from /proc/PID/stat; Redis's includes its
#    network work) and Redis calls per check (the
#    cmdstat_fcall/evalsha/eval delta of INFO commandstats ÷ checks).
#
# Cores: the server is pinned to CPU 0; Redis and the load generators share
# CPU 1 (needs 2 cores and `taskset`).
#
# `fallbacks` counts checks answered by on_store_error instead of Redis
# (store timeouts, breaker open); a run with fallbacks did not measure Redis.
#
# Usage: scripts/bench-redis.sh [ROUNDS] [DURATION]   (defaults: 3 rounds of 10s)
#        STORE_TIMEOUT=250ms (the default --store-timeout) may be lowered to see
#        how often a shorter timeout falls back on this machine.
#        SERVE_FLAGS adds flags to `tollgate serve`, e.g. SERVE_FLAGS="--lease-period 1s"
#        to measure quota leases against the exact path (calls/chk then counts
#        lease grants and returns too: every script call).
#        ALGORITHM (default token_bucket) is the rule's algorithm, 10^9 per second.
#        MODES (default "redis") lists the serve runs of each round, side by side:
#        `memory` (the in-memory store), `redis` (exact, one call per check),
#        `lease=DUR` (Redis with --lease-period DUR), `shares` (Redis, the rule
#        with `shares: true`: calls/chk then counts the holder's batched calls,
#        two script calls each), `starter` (shares with --shares-starter-slots 16:
#        a key's first use decided on the instance), e.g.
#        MODES="memory redis lease=1s shares starter". Each shares or starter run
#        starts from an empty Redis (FLUSHALL: the fleet's starter policy is the
#        first one written, and a previous run's registrations would keep slots).
#        BEFORE_BIN=<a tollgate binary> lets a mode end in @before: that mode
#        served by BEFORE_BIN (the load generator stays $bin), interleaved with
#        the others in each round, for a before/after ratio on a busy machine,
#        e.g. BEFORE_BIN=… MODES="memory redis redis@before" scripts/bench-redis.sh 3 5s.
#        RATE=N offers N checks a second (`tollgate bench rls --rate`, at most
#        64 in flight) instead of as many as 64 in flight answer: every mode
#        then serves the same load, so CPU per check compares like for like
#        (a saturated run gives the faster mode larger batches per wake-up).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-10s}
store_timeout=${STORE_TIMEOUT:-250ms}
algorithm=${ALGORITHM:-token_bucket}
modes=${MODES:-redis}
seconds=${duration%s}
source scripts/tollgate-bin.sh
redis_pin=(taskset -c 1)
source scripts/redis-bench-common.sh
script_calls() { # FCALL + EVALSHA + EVAL calls so far
    cli INFO commandstats | awk -F'[:=,]' '/^cmdstat_(fcall|eval(sha)?)(_ro)?:/ {n += $3} END {print n + 0}'
}

# 10^9 per second (a token bucket of 10^9 filling at 10^9 per second by
# default): every call is allowed and writes.
printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000000\n      algorithm: %s\n' \
    "$algorithm" > "$work/limits.yaml"
sed 's/^    rate_limit:/    shares: true\n    rate_limit:/' "$work/limits.yaml" > "$work/limits-shares.yaml"
load_bench_library

ceiling() { # KEYS
    local key='tg{0}bench' random=()
    [ "$1" -gt 1 ] && key='tg{__rand_int__}bench' && random=(-r "$1")
    local n=$((seconds * 150000))
    taskset -c 1 redis-benchmark -p "$port" -q -c 50 -P 16 -n "$n" "${random[@]}" \
        FCALL tollgate_bench_check 1 "$key" "0 c s 1 1 1000000000 0" | tr '\r' '\n' |
        awk '/requests per second/ {for (i = 2; i <= NF; i++) if ($i == "requests") v = $(i - 1)} END {print v}'
}

serve_run() { # KEYS MODE
    local store=(--store "redis://127.0.0.1:$port") limits="$work/limits.yaml" server=$bin mode=$2
    case "$mode" in
        *@before)
            [ -n "${BEFORE_BIN:-}" ] || { echo "error: MODES: $mode needs BEFORE_BIN" >&2; exit 2; }
            server=$BEFORE_BIN mode=${mode%@before} ;;
    esac
    case "$mode" in
        memory) store=(--store memory) ;;
        redis) ;;
        lease=*) store+=(--lease-period "${mode#lease=}") ;;
        shares) limits="$work/limits-shares.yaml" ;;
        starter) limits="$work/limits-shares.yaml"; store+=(--shares-starter-slots 16) ;;
        *) echo "error: MODES: unknown mode $2 (memory, redis, lease=DUR, shares, starter)" >&2; exit 2 ;;
    esac
    case "$mode" in shares | starter) cli FLUSHALL > /dev/null ;; esac
    : > "$work/serve.out" # emptied here, not by the background job: the wait below must not read the last run's address
    taskset -c 0 "$server" serve --config "$limits" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
        "${store[@]}" --store-timeout "$store_timeout" --log-level warn \
        ${SERVE_FLAGS:-} > "$work/serve.out" 2> "$work/serve.err" &
    local pid=$! addr=""
    for _ in $(seq 1 200); do
        addr=$(awk '/^listening on/ {print $3}' "$work/serve.out")
        [ -n "$addr" ] && break
        read -r -t 0.05 < /dev/zero || true # a bounded wait for the server to print its address
    done
    [ -n "$addr" ] || { echo "error: the server did not start: $(cat "$work/serve.err")" >&2; kill "$pid"; exit 1; }
    local calls0
    calls0=$(script_calls)
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    read -r ru0 rs0 < <(awk '{print $14, $15}' "/proc/$redis_pid/stat")
    taskset -c 1 "$bin" bench rls --addr "http://$addr" --domain bench --descriptor 'user={k}' \
        --keys "$1" -c 64 --connections 4 -d "$duration" --warmup 0s ${RATE:+--rate "$RATE"} --json > "$work/bench.json" ||
        { echo "error: the load generator failed; server stderr: $(cat "$work/serve.err")" >&2; kill "$pid"; exit 1; }
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    read -r ru1 rs1 < <(awk '{print $14, $15}' "/proc/$redis_pid/stat")
    local calls1
    calls1=$(script_calls)
    local http fallbacks
    http=$(awk '/^http listening on/ {print $4}' "$work/serve.out")
    # Checks answered by on_store_error instead of Redis (timeouts, breaker open): should be 0.
    fallbacks=$(python3 - "$http" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
print(int(sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("ratelimit_store_fallbacks_total"))))
PY
)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$u0" "$s0" "$u1" "$s1" "$calls0" "$calls1" "$work/bench.json" "$fallbacks" \
        "$ru0" "$rs0" "$ru1" "$rs1" <<'PY'
import json, os, sys
u0, s0, u1, s1, c0, c1 = map(int, sys.argv[1:7])
fallbacks = int(sys.argv[8])
ru0, rs0, ru1, rs1 = map(int, sys.argv[9:13])
redis_us = (ru1 + rs1 - ru0 - rs0) * 1e6 / os.sysconf("SC_CLK_TCK")
b = json.load(open(sys.argv[7]))
cpu_us = (u1 + s1 - u0 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
sys_us = (s1 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
answered = max(b["ok"] + b["over_limit"], 1)
lat = b["latency_us"]
print(f"{b['req_per_s']:9.0f} {lat['p50']:7d} {lat['p99']:7d} {lat['p99_9']:8d} {cpu_us / answered:11.2f} {sys_us / answered:11.2f} {redis_us / answered:12.2f} {(c1 - c0) / answered:10.3f} {fallbacks:9d} {b['errors']:6d}")
PY
}

echo "redis-server $(redis-server --version | awk '{print $3}'), scripted ceiling (redis-benchmark FCALL, -P 16 -c 50):"
printf '%-5s %-7s %12s\n' round keys 'scripts/s'
for round in $(seq 1 "$rounds"); do
    for keys in 1 100000; do
        printf '%-5s %-7s %12s\n' "$round" "$keys" "$(ceiling "$keys")"
    done
done
echo
echo "tollgate serve ($algorithm) under tollgate bench rls (-c 64, 4 connections${RATE:+, $RATE checks/s offered}):"
printf '%-5s %-7s %-12s %9s %7s %7s %8s %11s %11s %12s %10s %9s %6s\n' round keys mode 'checks/s' 'p50 µs' 'p99 µs' 'p99.9 µs' 'CPU µs/chk' 'sys µs/chk' 'Redis µs/chk' 'calls/chk' fallbacks errors
for round in $(seq 1 "$rounds"); do
    for keys in 1 100000; do
        for mode in $modes; do
            printf '%-5s %-7s %-12s ' "$round" "$keys" "$mode"
            serve_run "$keys" "$mode"
        done
    done
done
