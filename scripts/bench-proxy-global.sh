#!/usr/bin/env bash
# Measures the CPU of a global rate limit per request, whole path, in front of
# the same nginx (Debian) backend:
#
#   local     `tollgate proxy` with only a local limit (the anchor);
#   leased    `tollgate proxy --limits --store redis://… --lease-period 1s`:
#             the global limit decided in the proxy, from quota leases;
#   exact     the same with no lease: one Redis call per request;
#   envoy     Envoy 1.40's global rate limit filter asking `tollgate serve`
#             (exact, on the same Redis) once per request.
#
# Every limit is one hot descriptor that is never used up, so every request
# goes upstream. The proxy (Envoy and `tollgate serve` for `envoy`) runs on
# CPU 0; nginx, Redis and wrk on CPU 1 (`taskset`; without it nothing is
# pinned). Reported per run: requests/s, p50 and p99 latency, and CPU
# microseconds per request of the proxy, of the rate limit path beyond it
# (Redis, and `tollgate serve` for `envoy`) and of both (utime + stime from
# /proc/PID/stat around the run, over wrk's request count).
#
# Usage: scripts/bench-proxy-global.sh [ROUNDS] [DURATION] [CONNECTIONS]
#   ROUNDS defaults to 3, DURATION to 10s, CONNECTIONS to 64.
#   Envoy: $TOLLGATE_ENVOY, else .venv/bin/envoy (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-10s}
conns=${3:-64}
for tool in wrk nginx redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
source scripts/proxy-bench-common.sh

redis_port=$(free_port)
"${cpu1[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    > "$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 1 100); do
    redis-cli -p "$redis_port" PING >/dev/null 2>&1 && break
    read -r -t 0.05 < /dev/zero || true
done

# One hot descriptor, far from its limit.
cat > "$work/limits.yaml" <<YAML
domain: bench
descriptors:
  - key: generic_key
    value: hot
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML
proxy_yaml() { # PORT GLOBAL(in_process|none)
    cat <<YAML
listeners: [{address: "127.0.0.1:$1"}]
clusters:
  - name: nginx
    endpoints: [{address: "127.0.0.1:$nginx_port"}]
YAML
    if [ "$2" = in_process ]; then
        cat <<YAML
global_ratelimit:
  domain: bench
  rate_limit_service: {in_process: true}
routes:
  - name: all
    cluster: nginx
    rate_limits:
      - actions: [{generic_key: {descriptor_value: hot}}]
YAML
    else
        limit_config 1000000000 | sed 's/^/  /' | { echo "local_ratelimit:"; cat; }
        cat <<YAML
routes:
  - {name: all, cluster: nginx}
YAML
    fi
}

# Envoy's global rate limit filter asking the `rls` cluster, and the route's descriptor.
global_filter() {
    cat <<'YAML'
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench
              timeout: 1s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: rls}}
YAML
}
hot_descriptor='                  - actions: [{generic_key: {descriptor_value: hot}}]'

# Starts the case's processes: sets port, path_pids (the proxy first) and side_pids.
start_case() { # CASE
    port=$(free_port)
    side_pids=("$redis_pid")
    case $1 in
    local|leased|exact)
        local global=in_process lease=1s
        [ "$1" = local ] && global=none
        [ "$1" = exact ] && lease=0s
        proxy_yaml "$port" "$global" > "$work/proxy.yaml"
        "${cpu0[@]}" "$bin" proxy --config "$work/proxy.yaml" --limits "$work/limits.yaml" \
            --store "redis://127.0.0.1:$redis_port" --store-timeout 1s --lease-period "$lease" \
            --worker-threads 1 --log-level warn > "$work/proxy.out" 2> "$work/proxy.err" &
        path_pids=($!)
        ;;
    envoy)
        local rls_port http_port
        rls_port=$(free_port)
        http_port=$(free_port)
        "${cpu0[@]}" "$bin" serve --config "$work/limits.yaml" --store "redis://127.0.0.1:$redis_port" \
            --store-timeout 1s --grpc-addr "127.0.0.1:$rls_port" --http-addr "127.0.0.1:$http_port" \
            --log-level warn > "$work/serve.out" 2> "$work/serve.err" &
        side_pids+=($!)
        wait_http "$rls_port"
        envoy_bench_bootstrap "$port" "$(free_port)" "$(global_filter)" "$hot_descriptor" "$rls_port" \
            > "$work/envoy.yaml"
        "${cpu0[@]}" "$envoy" -c "$work/envoy.yaml" --concurrency 1 --log-level warn \
            --base-id $$ --disable-hot-restart > /dev/null 2> "$work/envoy.err" &
        path_pids=($!)
        ;;
    esac
    pids+=("${path_pids[@]}" "${side_pids[@]}")
    wait_http "$port"
    # Warm up: connections, leases.
    "${cpu1[@]}" wrk -t1 -c"$conns" -d1s "http://127.0.0.1:$port/" > /dev/null
}

stop_case() {
    for pid in "${path_pids[@]}" "${side_pids[@]:1}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}

ticks() { # PID... -> total utime + stime
    local total=0 u s
    for pid in "$@"; do
        read -r u s < <(awk '{print $14, $15}' "/proc/$pid/stat")
        total=$((total + u + s))
    done
    echo "$total"
}

run() { # CASE ROUND
    local p0 r0 p1 r1
    p0=$(ticks "${path_pids[@]}")
    r0=$(ticks "${side_pids[@]}")
    "${cpu1[@]}" wrk -t1 -c"$conns" -d"$duration" --latency "http://127.0.0.1:$port/" > "$work/wrk.out"
    p1=$(ticks "${path_pids[@]}")
    r1=$(ticks "${side_pids[@]}")
    python3 - "$1" "$2" "$p0" "$p1" "$r0" "$r1" "$work/wrk.out" <<'PY'
import os, re, sys
case, rnd = sys.argv[1:3]
p0, p1, r0, r1 = map(int, sys.argv[3:7])
text = open(sys.argv[7]).read()
def latency_us(label):
    m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else float("nan")
total = int(re.search(r"(\d+) requests in", text).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if m and int(m.group(1)):
    sys.exit(f"{case}: {m.group(1)} responses were not 2xx; the limit must never be reached")
tick = 1e6 / os.sysconf("SC_CLK_TCK")
proxy = (p1 - p0) * tick / total
side = (r1 - r0) * tick / total
print(f"{case:7} {rnd:>5} {rps:10.0f} {latency_us('50'):9.0f} {latency_us('99'):9.0f} {proxy:9.2f} {side:9.2f} {proxy + side:9.2f}")
PY
}

echo "# $rounds rounds of $duration at $conns connections; proxy on CPU 0, nginx + Redis + wrk on CPU 1; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# case    round      req/s   p50(us)   p99(us)  proxy_us  path_us  total_us   (CPU per request)"
for round in $(seq 1 "$rounds"); do
    for case in local leased exact envoy; do
        start_case "$case"
        run "$case" "$round"
        stop_case
    done
done
