#!/usr/bin/env bash
# Where `tollgate proxy`'s CPU goes per request: instructions (callgrind)
# split by who runs them (ours, hyper, tokio, the allocator, ...), and
# system calls (strace -c) per request, proxied and answered by a local 429.
#
# The same set-up as bench-proxy.sh (proxy-bench-common.sh): nginx behind
# `tollgate proxy --worker-threads 1` with a LocalRateLimit that never
# empties (proxied) or lets one request a second through (429). For each
# case the proxy runs once under callgrind, collecting only while wrk sends
# for SECONDS at CONNECTIONS connections (callgrind_control -i on/off), and
# once under strace -c -f for the same load (the connections' set-up
# counted too, a few calls per connection). Instruction counts do not
# depend on the machine's load; the syscall counts hardly do.
#
# Usage: scripts/profile-proxy.sh [SECONDS] [CONNECTIONS]
#   SECONDS defaults to 5, CONNECTIONS to 16. TOLLGATE_BIN measures a given build.
#   Needs valgrind, strace, wrk, nginx, python3 (and Envoy's path, which the
#   shared set-up checks: TOLLGATE_ENVOY).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
conns=${2:-16}
for tool in wrk nginx python3 valgrind callgrind_control callgrind_annotate strace; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done
source scripts/proxy-bench-common.sh

# Polls (bounded: 600 x 100 ms; valgrind starts slowly) until PORT answers.
wait_port() {
    for _ in $(seq 1 600); do
        python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()' "$1" 2>/dev/null && return 0
        read -r -t 0.1 < /dev/zero || true
    done
    echo "error: nothing listens on port $1" >&2
    return 1
}

start_under() { # CASE MAX_TOKENS WRAPPER... -> sets proxy_pid, proxy_port
    local case=$1 max=$2
    shift 2
    proxy_port=$(free_port)
    limit_config "$max" > "$work/limit.yaml"
    "$@" "$bin" proxy --listen "127.0.0.1:$proxy_port" --upstream "127.0.0.1:$nginx_port" \
        --local-ratelimit "$work/limit.yaml" --worker-threads 1 --log-level warn \
        > "$work/$case.out" 2> "$work/$case.err" &
    proxy_pid=$!
    pids+=("$proxy_pid")
    wait_port "$proxy_port"
}

load() { # CONNECTIONS DURATION -> prints wrk's request count
    "${cpu1[@]}" wrk -t1 -c"$1" -d"$2" "http://127.0.0.1:$proxy_port/" \
        | awk '/requests in/ {print $1}'
}

echo "# $secs s per case at $conns connections; instructions and syscalls per request"
for case in proxied 429; do
    # One token a second: under callgrind the proxy is slow enough for 100 to pass most requests.
    max=1000000000
    [ "$case" = 429 ] && max=1
    # callgrind, collecting only around the measured load.
    start_under "$case" "$max" "${cpu0[@]}" valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$work/cg.$case" --log-file="$work/vg.$case"
    load "$conns" 2s > /dev/null
    callgrind_control -i on "$proxy_pid" > /dev/null
    requests=$(load "$conns" "${secs}s")
    callgrind_control -i off "$proxy_pid" > /dev/null
    callgrind_control -d "$proxy_pid" > /dev/null
    kill -KILL "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    callgrind_annotate --inclusive=no --threshold=100 "$(ls "$work/cg.$case"* | tail -1)" > "$work/ann.$case"
    # strace: every syscall of every thread during the same load.
    start_under "$case" "$max" "${cpu0[@]}" strace -c -f -o "$work/strace.$case"
    strace_requests=$(load "$conns" "${secs}s")
    # The proxy (strace's child) stops; strace then writes its table and ends.
    pkill -TERM -P "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    python3 - "$case" "$requests" "$work/ann.$case" "$strace_requests" "$work/strace.$case" <<'PY'
import re, sys
case, requests, ann, sreq, strace = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
# Whose code a function is: the first path of its demangled name.
groups = [
    ("tollgate (ours)", ("tollgate_",)),
    ("hyper, hyper-util, h2", ("hyper::", "hyper_util::", "h2::", "httparse::")),
    ("tokio", ("tokio::",)),
    ("http, bytes (types)", ("http::", "bytes::", "http_body")),
    ("tower, futures, tracing, metrics", ("tower", "futures", "tracing", "prometheus_client", "arc_swap", "parking_lot", "lru")),
    ("allocator (malloc/free)", ("malloc", "free", "realloc", "calloc", "_int_", "cfree", "tcache", "arena_", "unlink_chunk", "sysmalloc")),
    ("std, core, libc", ("core::", "std::", "alloc::", "<alloc::", "__", "mem", "str", "pthread", "clock_gettime", "syscall", "epoll", "recv", "send", "read", "write", "_dl")),
]
total = 0
by = {g: 0 for g, _ in groups}
by["other"] = 0
line_re = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(\S.*)$")
for line in open(ann):
    m = line_re.match(line)
    if not m:
        continue
    ir = int(m.group(1).replace(",", ""))
    name = m.group(2)
    if "PROGRAM TOTALS" in name:
        total = ir
        continue
    # "file:function [object]": drop the file ("???" without debug info).
    m = re.match(r"^([^:\s]*):(?!:)", name)
    if m:
        name = name[m.end():]
    name = name.split(" [", 1)[0].strip()
    bare = name.lstrip("<")
    for g, prefixes in groups:
        if bare.startswith(prefixes):
            by[g] += ir
            break
    else:
        by["other"] += ir
print(f"## {case}: {requests} requests under callgrind, {sreq} under strace")
print(f"instructions per request: {total / requests:,.0f}")
for g, ir in sorted(by.items(), key=lambda kv: -kv[1]):
    print(f"  {g:36} {ir / requests:10,.0f}  {100 * ir / max(total, 1):5.1f}%")
calls = {}
for line in open(strace):
    f = line.split()
    # % time, seconds, usecs/call, calls, [errors,] syscall
    if len(f) >= 5 and f[3].isdigit() and f[-1].isidentifier() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
total_calls = sum(calls.values())
print(f"syscalls per request: {total_calls / max(sreq, 1):.2f}")
for name, n in sorted(calls.items(), key=lambda kv: -kv[1])[:8]:
    print(f"  {name:20} {n / max(sreq, 1):6.2f}")
PY
done
