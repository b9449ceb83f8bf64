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
envoy=${TOLLGATE_ENVOY:-$PWD/.venv/bin/envoy}
[ -x "$envoy" ] || { echo "error: no Envoy at $envoy; run scripts/test.sh or set TOLLGATE_ENVOY" >&2; exit 1; }
# CPU pinning prefixes; commands are started directly (not through a shell
# function) so that $! is the process itself, for its CPU time and its kill.
if command -v taskset >/dev/null; then cpu0=(taskset -c 0); cpu1=(taskset -c 1); else cpu0=(); cpu1=(); fi

cargo build -q --release -p tollgate
bin=$PWD/target/release/tollgate
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Polls (bounded: 200 x 50 ms) until something answers HTTP on PORT.
wait_http() {
    for _ in $(seq 1 200); do
        python3 - "$1" <<'PY' && return 0
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()
except OSError:
    sys.exit(1)
PY
        read -r -t 0.05 < /dev/zero || true
    done
    echo "error: nothing listens on port $1" >&2
    return 1
}

# nginx: one worker, its own prefix, answering 200 "ok" from memory.
nginx_port=$(free_port)
mkdir -p "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$nginx_port;
        location / { return 200 "ok\n"; }
    }
}
NGINX
"${cpu1[@]}" nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids+=($!)
wait_http "$nginx_port"

# The LocalRateLimit of each case (filter enabled and enforced everywhere).
limit_config() { # MAX_TOKENS
    cat <<YAML
stat_prefix: bench
token_bucket: {max_tokens: $1, tokens_per_fill: $1, fill_interval: 1s}
filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
YAML
}

envoy_bootstrap() { # PORT ADMIN_PORT MAX_TOKENS
    cat <<YAML
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: $2}}
static_resources:
  listeners:
  - name: bench
    address: {socket_address: {address: 127.0.0.1, port_value: $1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: nginx}
          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
$(limit_config "$3" | sed 's/^/              /')
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: nginx
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: nginx
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $nginx_port}}}
YAML
}

start_proxy() { # NAME MAX_TOKENS -> sets proxy_pid, proxy_port
    proxy_port=$(free_port)
    case $1 in
    tollgate)
        limit_config "$2" > "$work/limit.yaml"
        "${cpu0[@]}" "$bin" proxy --listen "127.0.0.1:$proxy_port" --upstream "127.0.0.1:$nginx_port" \
            --local-ratelimit "$work/limit.yaml" --worker-threads 1 --log-level warn \
            > "$work/tollgate.out" 2> "$work/tollgate.err" &
        ;;
    envoy)
        envoy_bootstrap "$proxy_port" "$(free_port)" "$2" > "$work/envoy.yaml"
        "${cpu0[@]}" "$envoy" -c "$work/envoy.yaml" --concurrency 1 --log-level warn \
            --base-id $$ --disable-hot-restart > /dev/null 2> "$work/envoy.err" &
        ;;
    esac
    proxy_pid=$!
    pids+=("$proxy_pid")
    wait_http "$proxy_port"
}

stop_proxy() {
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
}

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
