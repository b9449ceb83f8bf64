#!/usr/bin/env bash
# Measures `tollgate proxy` against Envoy 1.40 at equal load: both proxies get
# the same fixed request rates, so their latencies compare at the same load
# (wrk's closed loop in scripts/bench-proxy.sh drives the faster proxy harder).
#
# The setup is scripts/bench-proxy.sh's: both proxies run one worker thread
# (`--worker-threads 1`, `--concurrency 1`) with local_ratelimit, pinned to
# CPU 0, in front of the same nginx (one worker, `return 200`); nginx and the
# load generator share CPU 1 (`taskset`; without it nothing is pinned). Only
# the proxied case is measured: a bucket that never empties.
#
# `tollgate bench http --rate R` drives each proxy in an open loop at each
# rate, at most 64 requests in flight on 64 keep-alive connections; latency
# is measured from each request's intended send time, so a stalled proxy
# cannot hide behind a stalled client (no coordinated omission). After one
# unreported 1 s warm-up run per proxy, each run reports: the achieved req/s,
# p50, p99 and p99.9 latency, errors and non-2xx answers, and CPU
# microseconds per request of the proxy process (utime + stime from
# /proc/PID/stat around the run, over the requests sent).
#
# Usage: scripts/bench-proxy-latency.sh [DURATION] [RATES...]
#   DURATION defaults to 10s; RATES (req/s) to "5000 10000 20000", below
#   Envoy's ceiling of about 25k req/s with one worker on this kind of machine.
#   Envoy: $TOLLGATE_ENVOY, else .venv/bin/envoy (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
shift || true
rates=("$@")
[ ${#rates[@]} -eq 0 ] && rates=(5000 10000 20000)
in_flight=64
for tool in nginx python3; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
source scripts/proxy-bench-common.sh

load() { # RATE DURATION -> tollgate bench http's JSON report in $work/bench.json
    "${cpu1[@]}" "$bin" bench http --url "http://127.0.0.1:$proxy_port/" --rate "$1" \
        -c "$in_flight" -d "$2" --warmup 0s --json > "$work/bench.json"
}

run() { # PROXY RATE
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$proxy_pid/stat")
    load "$2" "$duration"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$proxy_pid/stat")
    python3 - "$1" "$2" "$u0" "$s0" "$u1" "$s1" "$work/bench.json" <<'PY'
import json, os, sys
proxy, rate = sys.argv[1:3]
u0, s0, u1, s1 = map(int, sys.argv[3:7])
report = json.load(open(sys.argv[7]))
total = report["requests"]
latency = report["latency_us"]
non_2xx = total - report["errors"] - report["status"]["2xx"]
cpu_us = (u1 + s1 - u0 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
per = cpu_us / total if total else float("nan")
print(f"{proxy:9} {rate:>6} {report['req_per_s']:9.0f} {latency['p50']:8} {latency['p99']:8} {latency['p99_9']:9} {report['errors']:7} {non_2xx:8} {per:10.2f}")
PY
}

echo "# duration $duration per run, open loop, at most $in_flight in flight; proxies on CPU 0, nginx + load on CPU 1"
echo "# proxy       rate     req/s  p50(us)  p99(us) p99.9(us)  errors  non-2xx cpu_us/req"
for proxy in tollgate envoy; do
    start_proxy "$proxy" 1000000000
    load "${rates[0]}" 1s # warm-up, not reported
    for rate in "${rates[@]}"; do
        run "$proxy" "$rate"
    done
    stop_proxy
done
