#!/usr/bin/env bash
# Counts the instructions `tollgate serve` executes per check, under
# valgrind's callgrind: unlike CPU time, the count repeats for the same
# binary and load whatever else the machine is doing, so two builds can be
# compared on a noisy machine. Only the server's user-space instructions are
# counted (no kernel time, no cache misses), after a 3 s warm-up; the load is
# `tollgate bench rls` on one hot key, 16 in flight over 2 connections.
#
# Prints one line per limits configuration (1 rule, 1000 rules): the checks
# answered while counting, the instructions counted, and their ratio.
#
# SERVE_FLAGS adds flags to `tollgate serve` (for instance
# SERVE_FLAGS='--worker-threads 2'); TOLLGATE_BIN picks the binary.
# REDIS=1 counts the exact Redis path instead of the in-memory store: a
# throwaway redis-server (scripts/redis-bench-common.sh) and
# `--store redis://…` (its own instructions are not counted).
#
# Usage: scripts/bench-rls-instructions.sh [SECONDS]   (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-8}
command -v callgrind_control > /dev/null || { echo "error: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
source scripts/tollgate-bin.sh
store=()
if [ -n "${REDIS:-}" ]; then
    redis_pin=()
    source scripts/redis-bench-common.sh # sets work, port and its cleanup
    store=(--store "redis://127.0.0.1:$port")
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
source scripts/rls-bench-limits.sh
write_rls_bench_limits "$work"

count() { # CONFIG_DIR
: > "$work/serve.out" # emptied here, not by the background job: the wait below must not read the last run's address
    # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.%p" \
        "$bin" serve --config "$1" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
        --log-level warn "${store[@]}" ${SERVE_FLAGS:-} > "$work/serve.out" 2> "$work/serve.err" &
    local pid=$! addr=""
    for _ in $(seq 1 600); do
        addr=$(awk '/^listening on/ {print $3}' "$work/serve.out")
        [ -n "$addr" ] && break
        read -r -t 0.1 < /dev/zero || true # a bounded wait for the server to print its address
    done
    [ -n "$addr" ] || { echo "error: the server did not start: $(cat "$work/serve.err")" >&2; kill "$pid"; exit 1; }
    local load=("$bin" bench rls --addr "http://$addr" --domain bench --descriptor 'user={k}' -c 16 --connections 2 --warmup 0s --json)
    "${load[@]}" -d 3s > /dev/null
    callgrind_control --instr=on "$pid" > /dev/null 2>&1
    "${load[@]}" -d "${seconds}s" > "$work/bench.json"
    callgrind_control --dump "$pid" > /dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    local ir
    ir=$(awk '/^summary:/ {print $2}' "$work"/cg."$pid".1)
    rm -f "$work"/cg.*
    python3 - "$ir" "$work/bench.json" <<'PY'
import json, sys
ir = int(sys.argv[1])
b = json.load(open(sys.argv[2]))
answered = b["ok"] + b["over_limit"]
print(f"{answered:9d} {ir:14d} {ir / answered:12.0f}")
PY
}

printf '%-6s %9s %14s %12s\n' rules checks instructions 'instr/check'
for rules in one many; do
    printf '%-6s ' "$([ $rules = one ] && echo 1 || echo 1000)"
    count "$work/$rules"
done
