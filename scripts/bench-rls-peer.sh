#!/usr/bin/env bash
# Tollgate against a peer rate limit service speaking Envoy's RLS v3 —
# Kuadrant's limitador-server, built outside this repository — under the
# same `tollgate bench rls` load (64 in flight, 4 connections), for one hot
# key and 100 000 keys, on the in-memory store and on Redis (exact: one
# script call per check for both). The rule is the same for both: a fixed
# window of 10^9 per second per `user` value, so every check is admitted
# and writes.
#
# The servers are pinned to CPU 0; the load generator and Redis to CPU 1.
# Reported per run: checks/s, p50/p99 and server CPU per check (utime +
# stime from /proc around the run).
#
# Usage: LIMITADOR=/path/to/limitador-server scripts/bench-rls-peer.sh [ROUNDS] [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
duration=${2:-5s}
limitador=${LIMITADOR:?set LIMITADOR to a limitador-server binary}
source scripts/tollgate-bin.sh
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

redis_port=$(free_port)
taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" > "$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$redis_port" PING 2>/dev/null)" = PONG ] && break
    read -r -t 0.05 < /dev/zero || true # a bounded wait for Redis to start
done

mkdir -p "$work/tollgate"
printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n' \
    > "$work/tollgate/limits.yaml"
cat > "$work/limitador.yaml" <<'YAML'
- namespace: bench
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables:
    - descriptors[0].user
YAML

# Polls (bounded: 200 x 50 ms) until PORT accepts connections.
wait_port() {
    for _ in $(seq 1 200); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), timeout=0.2).close()" 2>/dev/null && return 0
        read -r -t 0.05 < /dev/zero || true
    done
    echo "error: nothing listens on port $1; $(tail -5 "$work/server.err")" >&2
    exit 1
}

run() { # SERVER STORE KEYS
    local port http
    port=$(free_port); http=$(free_port)
    local store_url="redis://127.0.0.1:$redis_port"
    redis-cli -p "$redis_port" FLUSHALL > /dev/null
    case "$1" in
        tollgate)
            local store=memory
            [ "$2" = redis ] && store=$store_url
            taskset -c 0 "$bin" serve --config "$work/tollgate" --grpc-addr "127.0.0.1:$port" \
                --http-addr "127.0.0.1:$http" --store "$store" --log-level warn > /dev/null 2> "$work/server.err" &
            ;;
        limitador)
            local storage=(memory)
            [ "$2" = redis ] && storage=(redis "$store_url")
            taskset -c 0 "$limitador" "$work/limitador.yaml" -b 127.0.0.1 -p "$port" -B 127.0.0.1 -P "$http" \
                "${storage[@]}" > /dev/null 2> "$work/server.err" &
            ;;
    esac
    local pid=$!
    wait_port "$port"
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    taskset -c 1 "$bin" bench rls --addr "http://127.0.0.1:$port" --domain bench --descriptor 'user={k}' \
        --keys "$3" -c 64 --connections 4 -d "$duration" --warmup 0s --json > "$work/bench.json"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$u0" "$s0" "$u1" "$s1" "$work/bench.json" <<'PY'
import json, os, sys
u0, s0, u1, s1 = map(int, sys.argv[1:5])
b = json.load(open(sys.argv[5]))
cpu_us = (u1 + s1 - u0 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
answered = max(b["ok"] + b["over_limit"], 1)
lat = b["latency_us"]
print(f"{b['req_per_s']:9.0f} {lat['p50']:7d} {lat['p99']:7d} {cpu_us / answered:11.2f} {b['ok']:9d} {b['errors']:6d}")
PY
}

printf '%-5s %-10s %-7s %-7s %9s %7s %7s %11s %9s %6s\n' round server store keys 'checks/s' 'p50 µs' 'p99 µs' 'CPU µs/chk' ok errors
for round in $(seq 1 "$rounds"); do
    for store in memory redis; do
        for keys in 1 100000; do
            for server in tollgate limitador; do
                printf '%-5s %-10s %-7s %-7s ' "$round" "$server" "$store" "$keys"
                run "$server" "$store" "$keys"
            done
        done
    done
done
