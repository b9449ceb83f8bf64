#!/usr/bin/env bash
# Measures `tollgate proxy` against Envoy 1.40 as a sidecar with
# local_ratelimit in front of the same nginx (Debian) backend.
#
# Both proxies run one worker thread (`--worker-threads 1`, `--concurrency 1`)
# pinned to CPU 0; nginx (one worker, `return 200`) and wrk share CPU 1
# (`taskset`; without it nothing is pinned). Two cases: a bucket that never
# empties (the pure proxy cost) and one of 100 tokens per second that rejects
# most requests (the cost of a local 429). wrk drives each at 1, 16, 64 and
# 256 connections. Reported per run: requests/s, p50 and p99 latency, the
# share answered 429, and CPU microseconds per request of the proxy process
# (utime + stime from /proc/PID/stat around the run, over wrk's request count).
#
# Usage: scripts/bench-proxy.sh [DURATION] [CONNECTIONS...]
#   DURATION defaults to 10s; CONNECTIONS to "1 16 64 256".
#   Envoy: $TOLLGATE_ENVOY, else .venv/bin/envoy (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
shift || true
conns=("$@")
[ ${#conns[@]} -eq 0 ] && conns=(1 16 64 256)
for tool in wrk nginx python3; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
source scripts/proxy-bench-common.sh

run() { # PROXY CASE CONNECTIONS
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$proxy_pid/stat")
    "${cpu1[@]}" wrk -t1 -c"$3" -d"$duration" --latency "http://127.0.0.1:$proxy_port/" > "$work/wrk.out"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$proxy_pid/stat")
    python3 - "$1" "$2" "$3" "$u0" "$s0" "$u1" "$s1" "$work/wrk.out" <<'PY'
import os, re, sys
proxy, case, conns = sys.argv[1:4]
u0, s0, u1, s1 = map(int, sys.argv[4:8])
text = open(sys.argv[8]).read()
def latency_us(label):
    m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
total = int(re.search(r"(\d+) requests in", text).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
rejected = int(m.group(1)) if m else 0
cpu_us = (u1 + s1 - u0 - s0) * 1e6 / os.sysconf("SC_CLK_TCK")
per = cpu_us / total if total else float("nan")
print(f"{proxy:9} {case:8} {conns:>5} {rps:10.0f} {latency_us('50'):9.0f} {latency_us('99'):9.0f} {100 * rejected / max(total, 1):8.1f} {per:10.2f}")
PY
}

echo "# duration $duration per run; proxies on CPU 0, nginx + wrk on CPU 1"
echo "# proxy     case     conns      req/s   p50(us)   p99(us)   429(%)  cpu_us/req"
for proxy in tollgate envoy; do
    for case in open reject; do
        max=1000000000
        [ "$case" = reject ] && max=100
        start_proxy "$proxy" "$max"
        for c in "${conns[@]}"; do
            run "$proxy" "$case" "$c"
        done
        stop_proxy
    done
done
