#!/usr/bin/env bash
# Measures `tollgate serve` as a rate limit service: server CPU per check,
# checks per second and latency percentiles at 64 in flight, for one hot key
# and 100 000 keys, with 1 rule and with 1000 rules in the domain.
#
# The server is pinned to CPU 0 and the load generator (`tollgate bench rls`)
# to CPU 1 (needs 2 cores and `taskset`). Server CPU is read from
# /proc/PID/stat (utime + stime) around each run and divided by the checks
# answered. Each configuration runs ROUNDS times (default 3), 10 s each.
#
# SERVE_FLAGS adds flags to `tollgate serve`, for instance
# SERVE_FLAGS='--worker-threads 2' (two workers, still on CPU 0 alone: the
# same core and load as one worker, so the two CPU figures compare);
# TOLLGATE_BIN picks the binary (scripts/tollgate-bin.sh).
#
# Usage: scripts/bench-rls.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
source scripts/tollgate-bin.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source scripts/rls-bench-limits.sh
write_rls_bench_limits "$work"

run() { # CONFIG_DIR KEYS
    : > "$work/serve.out" # emptied here, not by the background job: the wait below must not read the last run's address
    # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
    taskset -c 0 "$bin" serve --config "$1" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
        --log-level warn ${SERVE_FLAGS:-} > "$work/serve.out" 2> "$work/serve.err" &
    local pid=$! addr=""
    for _ in $(seq 1 200); do
        addr=$(awk '/^listening on/ {print $3}' "$work/serve.out")
        [ -n "$addr" ] && break
        read -r -t 0.05 < /dev/zero || true # a bounded wait for the server to print its address
    done
    [ -n "$addr" ] || { echo "error: the server did not start: $(cat "$work/serve.err")" >&2; kill "$pid"; exit 1; }
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    taskset -c 1 "$bin" bench rls --addr "http://$addr" --domain bench --descriptor 'user={k}' \
        --keys "$2" -c 64 --connections 4 -d 10s --warmup 0s --json > "$work/bench.json"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$u0" "$s0" "$u1" "$s1" "$work/bench.json" <<'PY'
import json, os, sys
u0, s0, u1, s1 = map(int, sys.argv[1:5])
b = json.load(open(sys.argv[5]))
cpu_us = (u1 + s1 - u0 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
answered = b["ok"] + b["over_limit"]
lat = b["latency_us"]
print(f"{b['req_per_s']:9.0f} {lat['p50']:7d} {lat['p99']:7d} {lat['p99_9']:8d} {cpu_us / answered:11.2f} {b['errors']:6d}")
PY
}

printf '%-5s %-6s %-7s %9s %7s %7s %8s %11s %6s\n' round rules keys 'checks/s' 'p50 µs' 'p99 µs' 'p99.9 µs' 'CPU µs/chk' errors
for round in $(seq 1 "$rounds"); do
    for rules in one many; do
        for keys in 1 100000; do
            printf '%-5s %-6s %-7s ' "$round" "$([ $rules = one ] && echo 1 || echo 1000)" "$keys"
            run "$work/$rules" "$keys"
        done
    done
done
